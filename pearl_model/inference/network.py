"""The PEARL network in one self-contained file: character vocabulary and encoder, batching,
the model's forward pass, and loading an export directory.

It imports only torch, tokenizers, transformers and safetensors, never ``pearl_model``: every export ships a
copy of this file (and of ``st_module.py``) beside its weights, so that sentence-transformers
loads a trained model on a machine where this project is not installed. The library builds
on it: :mod:`pearl_model.inference.model` adds ``encode``, :mod:`pearl_model.training.char_encoder` training,
:mod:`pearl_model.inference.export` writing. What a phrase's vector is: see :mod:`pearl_model.inference.model`.
"""
from __future__ import annotations

import hashlib
import json
import os
import string
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch import nn

# transformers is imported where a backbone is loaded: a static or ONNX-only path never pays for it

PAD, UNK, BOW, EOW = 0, 1, 2, 3
_N_SPECIAL = 4
CHAR_FORMAT = "pearl-char-encoder/1"
CHAR_WEIGHTS, CHAR_CONFIG = "model.safetensors", "config.json"
FORMAT = "pearl-model/1"
CONFIG_FILE, HEAD_FILE, CHAR_DIR = "pearl_model.json", "pearl_head.safetensors", "char_encoder"
HEAD_KEYS = ("char_proj.weight", "char_proj.bias", "type_head.weight", "type_head.bias")
REQUIRED = ("config.json", "model.safetensors", HEAD_FILE, f"{CHAR_DIR}/config.json", f"{CHAR_DIR}/model.safetensors")
TYPE_INPUTS = ("raw", "unit")
ROW_CACHE = 500_000  # words whose character rows CharVocab keeps
N_TYPES = 95  # pearl_model.phrases.labels.LABELS (a test keeps them equal)


class PearlExportError(ValueError):
    """A directory that is not a (complete) PEARL export; the message names the path and what is wrong."""


# --- checksums.sha256: here, not in pearl_model.inference.checksums, so that an export's own copy of
# this file checks it where pearl_model is not installed (st_module.py); checksums.py builds on it.
CHECKSUMS = "checksums.sha256"
# A storage root keeps its own manifest beside a model version's files (storage.files.FileSet);
# it is not part of the export and carries its own sha256 list.
NOT_LISTED = frozenset({CHECKSUMS, "_manifest.json"})


class ChecksumError(PearlExportError):
    """A file of a model directory that does not match the directory's ``checksums.sha256``."""


def shown(name: str) -> str:
    """``name`` with control characters (and a non-UTF-8 name's escaped bytes) escaped: a file name
    cannot break an error's one line, nor fail to print."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def listed_files(root: Path) -> list[str]:
    """Every file under ``root`` that ``checksums.sha256`` lists, relative, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.relative_to(root).as_posix() not in NOT_LISTED)


def read_checksums(root: Path) -> dict[str, str] | None:
    """``root/checksums.sha256`` as {relative path: sha256}; None when there is none."""
    if not os.path.lexists(root / CHECKSUMS):
        return None
    if not (root / CHECKSUMS).is_file():  # a directory or a dangling link must not pass for "no checksums"
        raise ChecksumError(f"{root}/{CHECKSUMS} is not a file")
    listed = {}
    try:
        text = (root / CHECKSUMS).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ChecksumError(f"{root / CHECKSUMS}: not UTF-8 text") from e
    for n, line in enumerate(text.splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        parts = rel.split("/")
        if (not sep or len(digest) != 64 or digest.strip(string.hexdigits)
                or any(p in ("", ".", "..") for p in parts)):
            raise ChecksumError(f"{root / CHECKSUMS}: line {n} is not '<sha256>  <relative path>'")
        if rel in listed:
            raise ChecksumError(f"{root / CHECKSUMS}: line {n} lists {shown(rel)} again")
        listed[rel] = digest.lower()
    return listed


def check_listed(root: Path, listed: dict[str, str], present: list[str]) -> None:
    """Hash every file: raise :class:`ChecksumError` naming each one missing, changed or not listed."""
    problems = [f"{shown(rel)}: missing" for rel in listed if rel not in present]
    problems += [f"{shown(rel)}: not listed" for rel in present if rel not in listed]
    problems += [f"{shown(rel)}: sha256 differs" for rel in present
                 if rel in listed and sha256_file(root / rel) != listed[rel]]
    if problems:
        raise ChecksumError(f"{root}: does not match its {CHECKSUMS} (changed since export; load only "
                            f"directories you trust): " + "; ".join(problems))


def ships_checksums(config: dict | None) -> bool:
    """Whether a ``pearl_model.json`` says its directory ships ``checksums.sha256``: an export's does
    (``export_pearl`` writes both); one from before checksums, or re-saved by sentence-transformers
    (whose own files come after the module's, so no listing can be written), does not."""
    return isinstance(config, dict) and config.get("checksums") == CHECKSUMS


def no_checksums(root: Path) -> ChecksumError:
    """The refusal of an export whose ``checksums.sha256`` is gone (its pearl_model.json names it)."""
    return ChecksumError(f"{root}: a PEARL export without its {CHECKSUMS} ({CONFIG_FILE} says the export ships one: "
                         f"it was removed, or the directory copied without it): refused; copy the whole export again")


def verify_export(root: str | os.PathLike) -> int | None:
    """Check the export at ``root`` against its ``checksums.sha256``: the number of files; None for an
    export that ships none (:func:`ships_checksums`). Raises :class:`ChecksumError` naming what is wrong."""
    root = Path(root)
    listed = read_checksums(root)
    if listed is None:
        if ships_checksums(read_config(root)):
            raise no_checksums(root)
        return None
    check_listed(root, listed, listed_files(root))
    return len(listed)


def check_words(words: object, name: str = "words") -> list[str]:
    if isinstance(words, str) or not isinstance(words, Sequence):
        raise TypeError(f"{name} must be a list of str, got {type(words).__name__}")
    for w in words:
        if not isinstance(w, str):
            raise TypeError(f"{name} must contain str, got {type(w).__name__}")
        if not w or w.isspace():
            raise ValueError(f"{name} must not contain empty or whitespace-only words")
    return list(words)


class CharVocab:
    """Characters -> ids; 0 pad, 1 unknown, 2 word start, 3 word end, then sorted characters."""

    def __init__(self, chars: Sequence[str]):
        chars = list(chars)
        if any(not isinstance(c, str) or len(c) != 1 for c in chars) or len(set(chars)) != len(chars):
            raise ValueError("chars must be distinct one-character strings")
        self.chars = chars
        self.index = {c: i + _N_SPECIAL for i, c in enumerate(chars)}

    @classmethod
    def build(cls, words: Sequence[str]) -> "CharVocab":
        words = check_words(words)
        if not words:
            raise ValueError("cannot build a character vocabulary from no words")
        return cls(sorted({c for w in words for c in w}))

    def __len__(self) -> int:
        return len(self.chars) + _N_SPECIAL

    def encode(self, words: Sequence[str], max_len: int = 20) -> torch.Tensor:
        """(len(words), max_len) LongTensor: start, characters (truncated), end, padding.

        Always padded to exactly ``max_len`` so a word's row never depends on the batch.
        """
        words = check_words(words)
        if not isinstance(max_len, int) or max_len < 3:
            raise ValueError(f"max_len must be an int >= 3, got {max_len!r}")
        return torch.from_numpy(self.rows(words, max_len))

    def rows(self, words: Sequence[str], max_len: int) -> np.ndarray:
        """``encode`` as an int64 array, unchecked: each word's row is kept (words repeat, and
        this runs for every phrase ``encode()`` sees)."""
        cache = self.__dict__.setdefault("_rows", {})
        if len(cache) > ROW_CACHE:
            cache.clear()
        out = []
        for w in words:
            row = cache.get((w, max_len))
            if row is None:
                ids = [BOW] + [self.index.get(c, UNK) for c in w[: max_len - 2]] + [EOW]
                row = cache[(w, max_len)] = ids + [PAD] * (max_len - len(ids))
            out.append(row)
        return np.array(out, dtype=np.int64).reshape(len(out), max_len)


class CharEncoder(nn.Module):
    """Char embeddings -> Conv1d per kernel width -> ReLU -> max-pool -> MLP -> out_dim."""

    def __init__(self, n_chars: int, out_dim: int, *, char_dim: int = 32,
                 kernel_sizes: Sequence[int] = (2, 3, 4, 5), n_filters: int = 64,
                 hidden: int = 256, max_len: int = 20):
        super().__init__()
        kernel_sizes = tuple(int(k) for k in kernel_sizes)
        if n_chars <= _N_SPECIAL or out_dim < 1 or not kernel_sizes or min(kernel_sizes) < 1:
            raise ValueError("need n_chars > 4, out_dim >= 1 and positive kernel sizes")
        if max(kernel_sizes) > max_len:
            raise ValueError(f"kernel sizes {kernel_sizes} do not fit max_len={max_len}")
        self.config = {"n_chars": int(n_chars), "out_dim": int(out_dim), "char_dim": int(char_dim),
                       "kernel_sizes": list(kernel_sizes), "n_filters": int(n_filters),
                       "hidden": int(hidden), "max_len": int(max_len)}
        self.max_len = max_len
        self.embed = nn.Embedding(n_chars, char_dim, padding_idx=PAD)
        self.convs = nn.ModuleList(nn.Conv1d(char_dim, n_filters, k) for k in kernel_sizes)
        self.mlp = nn.Sequential(nn.Linear(n_filters * len(kernel_sizes), hidden), nn.ReLU(),
                                 nn.Linear(hidden, out_dim))

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        if char_ids.dim() != 2:
            raise ValueError(f"char_ids must be (batch, length), got shape {tuple(char_ids.shape)}")
        x = self.embed(char_ids).transpose(1, 2)  # (B, char_dim, L)
        pooled = [F.relu(conv(x)).amax(dim=2) for conv in self.convs]
        return self.mlp(torch.cat(pooled, dim=1))


def save_char_encoder(model: CharEncoder, vocab: CharVocab, path: str | Path) -> Path:
    """Write ``path/model.safetensors`` (weights) and ``path/config.json`` (vocab, dims)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path / CHAR_WEIGHTS))
    config = {"format": CHAR_FORMAT, "model": model.config, "chars": vocab.chars}
    (path / CHAR_CONFIG).write_text(json.dumps(config, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def load_char_encoder(path: str | Path, device: str | torch.device = "cpu") -> tuple[CharEncoder, CharVocab]:
    """Inverse of :func:`save_char_encoder`; reads safetensors and JSON only (no pickle)."""
    path = Path(path)
    config = json.loads((path / CHAR_CONFIG).read_text(encoding="utf-8"))
    if config.get("format") != CHAR_FORMAT:
        raise ValueError(f"{path} is not a {CHAR_FORMAT} checkpoint")
    vocab = CharVocab(config["chars"])
    cfg = dict(config["model"])
    if cfg.pop("n_chars") != len(vocab):
        raise ValueError("checkpoint vocabulary size does not match its config")
    model = CharEncoder(len(vocab), **cfg)
    model.load_state_dict(load_file(str(path / CHAR_WEIGHTS)))
    return model.to(device).eval(), vocab


def mean_pool(hidden, mask):
    """Mean of ``hidden`` (B, T, D) over the positions where ``mask`` (B, T) is nonzero."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1)


def check_phrases(phrases) -> list[str]:
    if isinstance(phrases, (str, bytes)):
        raise TypeError("encode() takes a list of phrases, not a single string: encode([phrase])")
    try:
        items = list(phrases)
    except TypeError:
        raise TypeError(f"encode() takes a list of strings, got {type(phrases).__name__}") from None
    for i, p in enumerate(items):
        if not isinstance(p, str):
            raise TypeError(f"phrase {i} is {type(p).__name__}, not str: {p!r:.60}")
    return items


def _check_phrases(phrases, allow_blank: bool = False) -> list[str]:
    # encode()'s type checks, plus: training phrases may not be empty.
    items = check_phrases(phrases)
    if not items:
        raise ValueError("no phrases given (empty input)")
    if not allow_blank:
        for i, p in enumerate(items):
            if not p.strip():
                raise ValueError(f"phrase {i} is empty or whitespace-only")
    return items


def collate(phrases: Sequence[str], tokenizer, char_vocab: CharVocab, prefix: str = "",
            max_length: int = 512, max_words: int = 16, max_chars: int = 20,
            allow_blank: bool = False, padding: bool | str = True) -> dict[str, torch.Tensor]:
    """Tensors for :meth:`PearlModel.forward`.

    ``input_ids``/``attention_mask``: ``prefix + phrase`` tokenised, padded to the longest
    in the batch, truncated at ``max_length`` tokens. ``char_ids`` (B, W, max_chars) and
    ``word_mask`` (B, W): the first ``max_words`` lowercased whitespace words of each
    phrase, W the most words of any phrase in the batch (at most ``max_words``).
    ``padding``: the tokenizer's (``"max_length"`` pads every batch to ``max_length``).
    ``allow_blank``: a blank phrase is the prefix alone with no words (a zero char vector),
    as ``PhraseEncoder.encode`` treats it; training batches never allow it.
    """
    items = _check_phrases(phrases, allow_blank)
    if max_words < 1:
        raise ValueError(f"max_words must be >= 1, got {max_words!r}")
    texts = [prefix + p.strip() for p in items]
    if padding is True:
        tok = fast_tokenizer(tokenizer, max_length)(texts)
    else:
        tok = tokenizer(texts, padding=padding, truncation=True, max_length=max_length, return_tensors="pt")
    words = [p.lower().split()[:max_words] for p in items]
    lengths = np.array([len(w) for w in words])
    word_mask = np.arange(max(1, lengths.max())) < lengths[:, None]
    char_ids = np.full((*word_mask.shape, max_chars), PAD, dtype=np.int64)
    char_ids[word_mask] = char_vocab.rows([w for ws in words for w in ws], max_chars)  # row-major: word order
    return {"input_ids": tok["input_ids"], "attention_mask": tok["attention_mask"],
            "char_ids": torch.from_numpy(char_ids), "word_mask": torch.from_numpy(word_mask)}


class FastTokenizer:
    """``tokenizer(texts, padding=True, truncation=True, max_length=m, return_tensors="pt")``'s
    ``input_ids`` and ``attention_mask``, from the Rust tokenizer directly: the transformers
    wrapper's per-call settings and per-token Python objects cost as much as the tokenising
    itself (2x the phrases/s measured here), and its settings changes make one tokenizer unsafe
    to share between threads; this copy is configured once and only read. A tokenizer without a
    Rust backend is called as it is."""

    def __init__(self, tokenizer, max_length: int):
        self.hf, self.max_length, self.rust = tokenizer, max_length, None
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None and tokenizer.pad_token is not None:
            rust = Tokenizer.from_str(backend.to_str())
            rust.enable_truncation(max_length)
            rust.enable_padding(direction=tokenizer.padding_side, pad_id=tokenizer.pad_token_id,
                                pad_type_id=tokenizer.pad_token_type_id, pad_token=tokenizer.pad_token)
            self.rust = rust
            self._encode = getattr(rust, "encode_batch_fast", rust.encode_batch)  # _fast: no offsets
            unpadded = Tokenizer.from_str(backend.to_str())
            unpadded.enable_truncation(max_length)
            unpadded.no_padding()
            self._unpadded = getattr(unpadded, "encode_batch_fast", unpadded.encode_batch)

    def lengths(self, texts: list[str]) -> np.ndarray:
        """Each text's length in tokens (special tokens included, truncated at ``max_length``)."""
        if self.rust is None:
            return np.array([len(ids) for ids in self.hf(texts, truncation=True, max_length=self.max_length)["input_ids"]])
        return np.array([len(e.ids) for e in self._unpadded(texts)])

    def __call__(self, texts: list[str]) -> dict[str, torch.Tensor]:
        if self.rust is None:
            tok = self.hf(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
            return {"input_ids": tok["input_ids"], "attention_mask": tok["attention_mask"]}
        encodings = self._encode(texts)
        return {"input_ids": torch.from_numpy(np.array([e.ids for e in encodings], dtype=np.int64)),
                "attention_mask": torch.from_numpy(np.array([e.attention_mask for e in encodings], dtype=np.int64))}


def fast_tokenizer(tokenizer, max_length: int) -> FastTokenizer:
    """The tokenizer's :class:`FastTokenizer` for ``max_length``, made once and kept with it."""
    kept = tokenizer.__dict__.setdefault("_pearl_fast", {})
    if max_length not in kept:
        kept[max_length] = FastTokenizer(tokenizer, max_length)
    return kept[max_length]


class Batcher:
    """:func:`collate` with its settings bound; ``batcher(phrases)`` -> dict of tensors."""

    def __init__(self, tokenizer, char_vocab: CharVocab, prefix: str = "", max_length: int = 512,
                 max_words: int = 16, max_chars: int = 20):
        self.tokenizer, self.char_vocab, self.prefix = tokenizer, char_vocab, prefix
        self.max_length, self.max_words, self.max_chars = max_length, max_words, max_chars

    def __call__(self, phrases: Sequence[str], allow_blank: bool = False) -> dict[str, torch.Tensor]:
        return collate(phrases, self.tokenizer, self.char_vocab, self.prefix, self.max_length,
                       self.max_words, self.max_chars, allow_blank)

    def lengths(self, phrases: Sequence[str]) -> np.ndarray:
        """Each phrase's length in backbone tokens, as :func:`collate` tokenises it."""
        return fast_tokenizer(self.tokenizer, self.max_length).lengths([self.prefix + p.strip() for p in phrases])


class PearlNetwork(nn.Module):
    """Backbone (mean pooling) ++ Linear(char phrase vector), and a linear 95-way type head."""

    def __init__(self, backbone: nn.Module, char_encoder: CharEncoder, char_proj_dim: int = 96,
                 n_labels: int = N_TYPES, batcher: Batcher | None = None, type_input: str = "raw"):
        super().__init__()
        if type_input not in TYPE_INPUTS:
            raise ValueError(f"type_input must be one of {TYPE_INPUTS}, got {type_input!r}")
        # "unit": the head reads the unit vector, so the type loss cannot grow or shrink the raw
        # vectors' norms (which KMeans and linear probes on raw vectors see); "raw": as the paper.
        self.type_input = type_input
        if char_proj_dim < 0 or n_labels < 1:
            raise ValueError("char_proj_dim must be >= 0 (0: no character branch) and n_labels >= 1")
        self.backbone, self.char_encoder = backbone, char_encoder
        self.backbone_dim = int(backbone.config.hidden_size)
        self.char_dim = int(char_encoder.config["out_dim"])
        # char_proj_dim 0 switches the character branch off: the vector is the backbone's alone.
        self.char_proj = nn.Linear(self.char_dim, char_proj_dim) if char_proj_dim else None
        self.dim = self.backbone_dim + char_proj_dim
        self.type_head = nn.Linear(self.dim, n_labels)
        self.batcher = batcher

    def char_vectors(self, char_ids: torch.Tensor, word_mask: torch.Tensor, dense: bool | None = None) -> torch.Tensor:
        """(B, char_dim): per phrase, the mean of its words' unit CharEncoder vectors.

        ``dense`` (default: on a GPU) encodes every word slot, padding included, and masks the
        padding out of the mean: no data-dependent shape, so the GPU never waits for the host to
        count the words (nor does a CUDA graph). Otherwise only the real words are gathered and
        encoded, fewer rows for a CPU. The same vectors either way (each word row is encoded alone)."""
        if char_ids.dim() != 3 or word_mask.shape != char_ids.shape[:2]:
            raise ValueError(f"char_ids must be (batch, words, chars) and word_mask (batch, words), "
                             f"got {tuple(char_ids.shape)} and {tuple(word_mask.shape)}")
        mask = word_mask.bool()
        if char_ids.is_cuda if dense is None else dense:
            words = F.normalize(self.char_encoder(char_ids.flatten(0, 1)), dim=-1)
            return mean_pool(words.unflatten(0, mask.shape), mask)
        words = F.normalize(self.char_encoder(char_ids[mask]), dim=-1)  # only the real words
        per_word = words.new_zeros((*mask.shape, words.shape[-1]))
        per_word[mask] = words
        return mean_pool(per_word, mask)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, char_ids: torch.Tensor,
                word_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(embeddings (B, backbone_dim + char_proj_dim), type_logits (B, n_labels)), unnormalised."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        sem = mean_pool(hidden, attention_mask).float()
        # float32 out whatever the weights' dtype (a user's model.half() or .to(bfloat16) included):
        # each small layer is fed its own dtype
        emb = sem if self.char_proj is None else torch.cat(
            [sem, self.char_proj(self.char_vectors(char_ids, word_mask).to(self.char_proj.weight.dtype)).float()], dim=-1)
        return emb, self.type_head(self.head_input(emb).to(self.type_head.weight.dtype))

    def head_input(self, emb: torch.Tensor) -> torch.Tensor:
        """What a head over the vector reads: the raw vector, or the unit one (``type_input``)."""
        return F.normalize(emb, dim=-1) if self.type_input == "unit" else emb


def read_config(path: Path) -> dict | None:
    try:
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) and config.get("format") == FORMAT else None


def load_network(path: str | os.PathLike, device: str | torch.device | None = None, cls: type = PearlNetwork):
    """The network saved at ``path`` (a ``cls``, in eval mode, with its batcher and ``export_config``).

    ``device``: default CUDA when available, else CPU. Reads safetensors and JSON only.
    """
    import transformers
    from transformers import AutoModel, AutoTokenizer

    path = Path(path).expanduser()
    if not path.is_dir():
        raise PearlExportError(f"{path}: no such directory (expected a PEARL export)")
    if not (path / CONFIG_FILE).is_file():
        raise PearlExportError(f"{path} is not a PEARL export: no {CONFIG_FILE}")
    config = read_config(path)
    if config is None:
        raise PearlExportError(f"{path}/{CONFIG_FILE} is unreadable or not of format {FORMAT!r}")
    missing = [f for f in REQUIRED if not (path / f).is_file()]
    if missing:
        raise PearlExportError(f"{path} is an incomplete PEARL export: missing {', '.join(missing)}")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"

    model_kw = {} if config.get("add_pooling_layer") is None else {"add_pooling_layer": config["add_pooling_layer"]}
    tok_kw = {"fix_mistral_regex": False} if transformers.__version__.startswith("4.57.") else {}
    try:
        backbone = AutoModel.from_pretrained(path, use_safetensors=True, **model_kw)
        tokenizer = AutoTokenizer.from_pretrained(path, **tok_kw)
        char, vocab = load_char_encoder(path / CHAR_DIR)
        head = load_file(str(path / HEAD_FILE))
    except (OSError, ValueError) as e:
        raise PearlExportError(f"cannot load the PEARL export at {path}: {e}") from e
    expected = HEAD_KEYS if config["char_proj_dim"] else HEAD_KEYS[2:]  # 0: no character branch
    if sorted(head) != sorted(expected):
        raise PearlExportError(f"{path}/{HEAD_FILE} holds {sorted(head)}, expected {list(expected)}")
    batcher = Batcher(tokenizer, vocab, config["query_prefix"], config["max_length"], config["max_words"],
                      config["max_chars"])
    model = cls(backbone, char, char_proj_dim=config["char_proj_dim"], n_labels=config["n_labels"],
                batcher=batcher, type_input=config.get("type_input", "raw"))  # older exports: raw
    try:
        if model.char_proj is not None:
            model.char_proj.load_state_dict({k.split(".", 1)[1]: v for k, v in head.items()
                                             if k.startswith("char_proj.")})
        model.type_head.load_state_dict({k.split(".", 1)[1]: v for k, v in head.items() if k.startswith("type_head.")})
    except RuntimeError as e:
        raise PearlExportError(f"{path}/{HEAD_FILE} does not fit {CONFIG_FILE}: {e}") from e
    if model.dim != config["dim"]:
        raise PearlExportError(f"{path}: loaded model has dim {model.dim}, {CONFIG_FILE} says {config['dim']}")
    model.export_config = config
    return model.to(device).eval()
