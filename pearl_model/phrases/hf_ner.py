"""OntoNotes entities from a transformers token-classification model (the paper: DeBERTa on OntoNotes).

The model's labels are checked against the 18 OntoNotes types when it is loaded, so a
tagger trained on another tag set (CoNLL's PER/LOC/ORG/MISC) fails at once with the
labels it cannot type, instead of silently dropping or mistyping entities in a long run.
"""
from __future__ import annotations

import os
import re
from typing import Mapping, Sequence

from .labels import ONTONOTES_TYPES, ontonotes_type
from .spans import Entity, ModelMissing, ParsedSentence

# transformers is imported where the NER model is loaded: mining imports this module for every backend.

# Strategies that group word pieces into entity spans; "none" returns one row per token.
AGGREGATIONS = ("simple", "first", "average", "max")
# What a hub id looks like ("name" or "owner/name"); anything else is taken as a path.
_HUB_ID = re.compile(r"[A-Za-z0-9_][\w.-]*(/[\w.-]+)?")


def _group(label: str) -> str:
    """A tag without its BIO/BIOES prefix, upper-cased: "B-org" -> "ORG"."""
    tag = label.strip().upper()
    return tag[2:] if len(tag) > 2 and tag[1] in "-_" and tag[0] in "BIELSU" else tag


def strip_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """[start, end) without surrounding whitespace; None when nothing is left.

    SentencePiece tokenizers (DeBERTa's) give a word's offsets including the space
    before it ("▁York"), so an entity can start with a space.
    """
    piece = text[start:end]
    lead = len(piece) - len(piece.lstrip())
    trail = len(piece) - len(piece.rstrip())
    start, end = start + lead, end - trail
    return (start, end) if start < end else None


class TransformersNer:
    """EntityRecognizer over a transformers token-classification pipeline.

    ``label_map`` maps a model's labels (with or without the B-/I- prefix; case does not
    matter) to an OntoNotes type or alias, or to None to ignore that label, e.g.
    ``{"MISC": None}`` for a CoNLL-style tagger. Labels not in it go through
    ``labels.ontonotes_type``. ``max_chars`` cuts longer texts before tagging (entities
    past the cut are not found); the model's own length limit applies as well.
    """

    name = "transformers"

    def __init__(self, model: str, device: str | int | None = None, batch_size: int = 32,
                 aggregation: str = "simple", label_map: Mapping[str, str | None] | None = None,
                 max_chars: int | None = None) -> None:
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation {aggregation!r} must be one of {AGGREGATIONS} "
                             f"(entities need word pieces grouped)")
        if batch_size < 1 or (max_chars is not None and max_chars < 1):
            raise ValueError("batch_size and max_chars must be positive")
        self.model_name, self.batch_size, self.max_chars = model, batch_size, max_chars
        self._label_map: dict[str, str | None] = {}
        for raw, target in (label_map or {}).items():
            typed = None if target is None else ontonotes_type(target)
            if target is not None and typed is None:
                raise ValueError(f"label_map[{raw!r}] = {target!r} is not an OntoNotes type "
                                 f"{ONTONOTES_TYPES} (or None to ignore)")
            self._label_map[raw.strip().upper()] = typed
        self._pipe = self._load(model, device, aggregation)

    def entity_type(self, label: str) -> str | None:
        """The OntoNotes type of a model label or entity group; None to drop it."""
        key = label.strip().upper()
        for k in (key, _group(key)):
            if k in self._label_map:
                return self._label_map[k]
        return ontonotes_type(key)

    def _load(self, model: str, device: str | int | None, aggregation: str):
        from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer, pipeline

        path = os.path.expanduser(model)
        local = os.path.exists(path) or not _HUB_ID.fullmatch(model)
        # config.json checked here, not left to AutoConfig: without it AutoConfig guesses the
        # architecture from the path's name ("empty" contains "mpt" and loads an MPT config).
        if local and not os.path.isfile(os.path.join(path, "config.json")):
            what = "has no config.json" if os.path.isdir(path) else "is not a directory"
            raise ModelMissing(f"NER model {model!r} {what}; it needs a local model directory "
                               f"(config.json, weights, tokenizer) or a hub name with hub access")
        source = path if local else model
        # A local directory must never fall back to the hub (a typo would start a download).
        kw = {"local_files_only": True} if local else {}

        def missing(err: Exception, part: str) -> ModelMissing:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            return ModelMissing(f"NER model {model!r}: {part} could not be loaded ({reason}); it needs a local "
                                f"model directory or hub access to download it")

        # transformers reports "not found" and "couldn't connect" as OSError.
        try:
            config = AutoConfig.from_pretrained(source, **kw)
        except OSError as err:
            raise missing(err, "config") from None
        self._check_labels(model, config.id2label)  # before the weights: fail fast
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True, **kw)
        except (OSError, TypeError, ValueError) as err:  # no tokenizer files: a TypeError on vocab_file=None
            raise missing(err, "tokenizer") from None
        try:
            # use_safetensors=None: safetensors when the model has them, else the .bin weights.
            net = AutoModelForTokenClassification.from_pretrained(source, config=config, use_safetensors=None, **kw)
        except OSError as err:
            raise missing(err, "weights") from None
        if not tokenizer.is_fast:
            raise ValueError(f"NER model {model!r} has no fast tokenizer; character offsets need one")
        # Tokenizers saved without a length limit report a huge model_max_length, and then
        # the pipeline would feed long texts past the model's position embeddings.
        limit = getattr(config, "max_position_embeddings", None)
        if limit and tokenizer.model_max_length > limit:
            tokenizer.model_max_length = limit
        net.eval()
        return pipeline("token-classification", model=net, tokenizer=tokenizer,
                        aggregation_strategy=aggregation, device=device)

    def _check_labels(self, model: str, id2label: Mapping[int, str]) -> None:
        def typed(lab: str) -> bool:  # an explicit label_map entry (even None) counts as typed
            explicit = any(k in self._label_map for k in (lab.strip().upper(), _group(lab)))
            return explicit or ontonotes_type(lab) is not None
        bad = sorted({_group(lab) for lab in id2label.values() if _group(lab) != "O" and not typed(lab)})
        if bad:
            raise ValueError(f"NER model {model!r} has labels that are not OntoNotes types: {', '.join(bad)}; "
                             f"pass label_map to map them to OntoNotes types or to None to ignore them, "
                             f"e.g. label_map={{{', '.join(repr(b) + ': None' for b in bad)}}}")

    def entities(self, parsed: Sequence[ParsedSentence]) -> list[list[Entity]]:
        return self.entities_for_texts([p.text for p in parsed])

    def entities_for_texts(self, texts: Sequence[str]) -> list[list[Entity]]:
        out: list[list[Entity]] = [[] for _ in texts]
        cut = [t[:self.max_chars] if self.max_chars else t for t in texts]
        # Blank texts never reach the pipeline: the tokenizer gives no tokens for them.
        todo = [i for i, t in enumerate(cut) if t.strip()]
        if not todo:
            return out
        results = self._pipe([cut[i] for i in todo], batch_size=self.batch_size)
        for i, found in zip(todo, results):
            for e in found:
                etype = self.entity_type(e["entity_group"])
                span = strip_span(cut[i], e["start"], e["end"]) if etype else None
                if span:
                    out[i].append(Entity(span[0], span[1], etype))
        return out
