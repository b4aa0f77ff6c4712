"""Phrase-level paraphrases from a seq2seq model, for PEARL's positives (the paper: Parrot, a T5).

``T5Paraphraser`` loads any transformers seq2seq checkpoint (T5ForConditionalGeneration
for Parrot) by hub name or local directory and runs the model's own ``generate`` with
beam search, batched and seeded. The model sees ``prefix + phrase`` (Parrot's input is
"paraphrase: <phrase>"). What comes back goes through ``clean_candidates``: whitespace
collapsed, case-insensitive duplicates, empty strings and copies of the input dropped,
in the model's score order.

Diverse beam search (``num_beam_groups``/``diversity_penalty``) is not offered: from
transformers 4.56 it lives in a hub repository that ``generate`` only runs with
``trust_remote_code=True`` and a download.
"""
from __future__ import annotations

import os
from typing import Iterable, Sequence

from pearl_model.phrases.hf_ner import _HUB_ID
from pearl_model.phrases.spans import ModelMissing

# torch, transformers and huggingface_hub are imported where the seq2seq model is loaded and run:
# the candidates' cleaning (clean_candidates, normalize) needs none of them.

__all__ = ["T5Paraphraser", "clean_candidates", "normalize"]

MAX_INPUT_TOKENS = 256  # phrases are short; longer inputs are cut to this many tokens
PROBE_TIMEOUT_S = 5.0


def normalize(text: str) -> str:
    """Whitespace stripped and collapsed to single spaces."""
    return " ".join(text.split())


def clean_candidates(phrase: str, candidates: Iterable[str], limit: int | None = None) -> list[str]:
    """Candidates in their given order, whitespace-normalised, without empty strings, case-insensitive
    duplicates (the first is kept) or copies of ``phrase`` (casefold and whitespace do not count);
    at most ``limit`` of them."""
    seen = {normalize(phrase).casefold()}
    out: list[str] = []
    for cand in candidates:
        text = normalize(cand)
        key = text.casefold()
        if text and key not in seen:
            seen.add(key)
            out.append(text)
            if limit is not None and len(out) >= limit:
                break
    return out


class T5Paraphraser:
    """Paraphrase candidates for phrases, from ``model.generate`` on a seq2seq checkpoint.

    Beam search (default) keeps ``num_beams`` hypotheses and returns all of them, in score
    order, to ``clean_candidates``, which keeps at most ``num_return_sequences``: beams that
    repeat the input or each other are replaced by the next ones. ``sampling=True`` draws
    ``num_beams`` samples per phrase instead (draw order); the RNG is reseeded with ``seed``
    before each batch inside a forked RNG state (the caller's torch RNG is left alone), so
    sampled results repeat for the same seed and ``batch_size``. Beam search does not
    depend on the batching.
    """

    def __init__(self, model: str, device: str | int | None = None, num_return_sequences: int = 3,
                 num_beams: int = 5, max_new_tokens: int = 32, prefix: str = "paraphrase: ",
                 batch_size: int = 16, seed: int = 0, sampling: bool = False) -> None:
        if min(num_return_sequences, max_new_tokens, batch_size) < 1:
            raise ValueError("num_return_sequences, max_new_tokens and batch_size must be positive")
        if num_beams < num_return_sequences:
            raise ValueError(f"num_beams ({num_beams}) must be >= num_return_sequences ({num_return_sequences})")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be str, got {type(prefix).__name__}")
        import torch

        self.model_name, self.prefix, self.seed, self.sampling = model, prefix, seed, sampling
        self.num_return_sequences, self.num_beams = num_return_sequences, num_beams
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        elif isinstance(device, int):
            device = "cpu" if device < 0 else f"cuda:{device}"
        self.device = torch.device(device)
        self.tokenizer, self.model = self._load(model)
        self.model.to(self.device).eval()

    # --- loading -----------------------------------------------------------------------------------
    def _load(self, model: str):
        path = os.path.expanduser(model)
        local = os.path.exists(path) or not _HUB_ID.fullmatch(model)
        if local:
            # config.json checked here: without it AutoConfig guesses an architecture from the path's name.
            if not os.path.isfile(os.path.join(path, "config.json")):
                what = "has no config.json" if os.path.isdir(path) else "is not a directory"
                raise ModelMissing(f"paraphrase model {model!r} {what}; it needs a local seq2seq model directory "
                                   f"(config.json, weights, tokenizer) or a hub name with hub access")
            return self._from_pretrained(model, path, local_files_only=True)  # never falls back to the hub
        try:  # a hub name already in the local cache needs no network
            return self._from_pretrained(model, model, local_files_only=True)
        except ModelMissing:
            pass
        self._probe_hub(model)
        return self._from_pretrained(model, model, local_files_only=False)

    @staticmethod
    def _probe_hub(model: str) -> None:
        """One short request before downloading: without it an unreachable hub costs ~25 s of retries."""
        from transformers.utils import is_offline_mode

        if is_offline_mode():
            return  # from_pretrained fails at once, without touching the network
        from huggingface_hub import constants, get_session

        try:
            get_session().head(constants.ENDPOINT, timeout=PROBE_TIMEOUT_S, allow_redirects=False)
        except Exception as err:  # requests' ConnectionError/Timeout (or httpx's, in newer hub clients)
            raise ModelMissing(f"paraphrase model {model!r} is not in the local Hugging Face cache and the hub "
                               f"({constants.ENDPOINT}) cannot be reached ({type(err).__name__}); it needs a local "
                               f"model directory or hub access to download it") from None

    @staticmethod
    def _from_pretrained(model: str, source: str, local_files_only: bool):
        from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

        def missing(err: Exception, part: str) -> ModelMissing:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            return ModelMissing(f"paraphrase model {model!r}: {part} could not be loaded ({reason}); it needs a "
                                f"local seq2seq model directory or hub access to download it")

        kw = {"local_files_only": local_files_only, "trust_remote_code": False}
        try:  # transformers reports "not found" and "couldn't connect" as OSError
            config = AutoConfig.from_pretrained(source, **kw)
        except OSError as err:
            raise missing(err, "config") from None
        if not getattr(config, "is_encoder_decoder", False):
            raise ValueError(f"paraphrase model {model!r} is a {config.model_type!r} model, not a seq2seq "
                             f"(encoder-decoder) model such as T5")
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, **kw)
        except (OSError, TypeError, ValueError) as err:  # no tokenizer files: a TypeError on vocab_file=None
            raise missing(err, "tokenizer") from None
        try:  # use_safetensors=None: safetensors where the model has them, else the .bin weights
            net = AutoModelForSeq2SeqLM.from_pretrained(source, config=config, use_safetensors=None, **kw)
        except OSError as err:
            raise missing(err, "weights") from None
        if tokenizer.pad_token_id is None:
            raise ValueError(f"paraphrase model {model!r}: the tokenizer has no pad token; batching needs one")
        return tokenizer, net

    # --- generation --------------------------------------------------------------------------------
    def paraphrases(self, phrases: Sequence[str]) -> list[list[str]]:
        """One list of cleaned candidates per phrase, in order; [] for blank phrases."""
        if isinstance(phrases, str):
            raise TypeError("phrases must be a sequence of str, not one str")
        phrases = list(phrases)
        for p in phrases:
            if not isinstance(p, str):
                raise TypeError(f"each phrase must be str, got {type(p).__name__}")
        out: list[list[str]] = [[] for _ in phrases]
        todo = [i for i, p in enumerate(phrases) if p.strip()]
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start:start + self.batch_size]
            raw = self._generate([normalize(phrases[i]) for i in batch])
            for i, cands in zip(batch, raw):
                out[i] = clean_candidates(phrases[i], cands, self.num_return_sequences)
        return out

    def _generate(self, texts: list[str]) -> list[list[str]]:
        """num_beams decoded candidates per text, in the order generate returns them."""
        import torch

        limit = min(self.tokenizer.model_max_length, MAX_INPUT_TOKENS)
        enc = self.tokenizer([self.prefix + t for t in texts], return_tensors="pt", padding=True,
                             truncation=True, max_length=limit).to(self.device)
        pool = self.num_beams
        search = {"do_sample": True, "num_beams": 1} if self.sampling else {"do_sample": False, "num_beams": pool}
        # num_beam_groups=1 in the call: a checkpoint's generation_config asking for group beam search
        # would otherwise make generate demand trust_remote_code.
        cuda = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda), torch.inference_mode():
            torch.manual_seed(self.seed)
            seqs = self.model.generate(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                                       num_return_sequences=pool, max_new_tokens=self.max_new_tokens,
                                       pad_token_id=self.tokenizer.pad_token_id, num_beam_groups=1, **search)
        decoded = self.tokenizer.batch_decode(seqs, skip_special_tokens=True)
        return [decoded[k * pool:(k + 1) * pool] for k in range(len(texts))]
