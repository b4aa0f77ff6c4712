"""The whole PEARL model (backbone + character branch) as one sentence-transformers input module.

Every export (:func:`pearl_model.inference.export.export_pearl`) carries a copy of this file and of
``network.py`` in its root, and a ``modules.json`` of two modules: ``st_module.PearlSTModule``
(this class: tokenises with the network's batcher into ``input_ids, attention_mask, char_ids,
word_mask`` and outputs ``sentence_embedding``, the unnormalised concatenation) followed by
sentence-transformers' own ``Normalize``. So a sentence-transformers user, with or without this
project installed, gets exactly the vectors of ``load_pearl(path).encode(...)``::

    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("path/to/export", device="cpu", trust_remote_code=True)
    vectors = model.encode(["heart attack", "myocardial infarction"])

How sentence-transformers (5.x) finds the class: ``st_module.PearlSTModule`` is a
repository-local reference, which it imports from the model directory through transformers'
dynamic-module loader (the relative import of ``.network`` comes along). That is code run from
the directory, hence ``trust_remote_code=True`` (5.7 still trusts a local directory without it,
with a FutureWarning; 6.0 will require it). Needs sentence-transformers >= 5.

The query prefix (E5: ``"query: "``) is built in, so the export declares no prompts. An
explicit ``prompt=`` given to ``encode`` is put before that prefix, for the backbone only:
the character branch always reads the phrase's own words.

This file imports only torch, sentence-transformers and ``.network`` (and, where it is installed,
``pearl_model``'s model directory door, which checks the directory before it is loaded; without it,
``.network`` checks the export's ``checksums.sha256``); saving with
``model.save()`` writes the files from the weights where ``pearl_model`` is installed, else
copies the directory the model was loaded from.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from sentence_transformers.base.modules.input_module import InputModule

from .network import CHECKSUMS, CONFIG_FILE, PearlNetwork, collate, load_network, read_config, verify_export

__all__ = ["PearlSTModule"]


class PearlSTModule(InputModule):
    """Phrases -> PEARL features -> ``sentence_embedding`` (and ``type_logits``), unnormalised."""

    config_file_name = "sentence_bert_config.json"  # the root's config.json is the backbone's
    config_keys = ["max_seq_length"]
    save_in_root = True

    def __init__(self, pearl: PearlNetwork, source: str | None = None):
        super().__init__()
        if pearl.batcher is None:
            raise ValueError("PearlSTModule needs a PearlModel with a batcher (tokenizer + char vocabulary)")
        self.pearl = pearl
        self.source = source  # the export directory it was loaded from

    # --- what SentenceTransformer asks of its first module ---------------------------------
    @property
    def tokenizer(self):
        return self.pearl.batcher.tokenizer

    @tokenizer.setter
    def tokenizer(self, value) -> None:
        self.pearl.batcher.tokenizer = value

    @property
    def max_seq_length(self) -> int:
        return self.pearl.batcher.max_length

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        self.pearl.batcher.max_length = int(value)

    def get_embedding_dimension(self) -> int:
        return self.pearl.dim

    def preprocess(self, inputs: list, prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        if not all(isinstance(x, str) for x in inputs):
            raise TypeError("PEARL embeds phrases: every input must be a str")
        b = self.pearl.batcher
        return collate(inputs, b.tokenizer, b.char_vocab, (prompt or "") + b.prefix, b.max_length,
                       b.max_words, b.max_chars, allow_blank=True)  # as PearlModel.encode

    def forward(self, features: dict[str, torch.Tensor | Any], **kwargs) -> dict[str, torch.Tensor | Any]:
        emb, logits = self.pearl(input_ids=features["input_ids"], attention_mask=features["attention_mask"],
                                 char_ids=features["char_ids"], word_mask=features["word_mask"])
        features["sentence_embedding"] = emb
        features["type_logits"] = logits
        return features

    # --- saving and loading: the PEARL export format, in the model's root --------------------
    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        config = getattr(self.pearl, "export_config", None) or {}
        try:
            from pearl_model.inference.export import write_files
        except ImportError:  # a machine without this project: the loaded files are the model
            if self.source is None:
                raise RuntimeError("saving a PEARL model needs pearl_model installed, or a model loaded from a "
                                   "directory") from None
            shutil.copytree(self.source, output_path, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("onnx", "1_Normalize", "__pycache__",
                                                          CHECKSUMS))  # saved anew: not the export's
            config = read_config(Path(output_path))
            if config is not None:  # sentence-transformers writes files after this: no listing can follow
                config.pop("checksums", None)
                (Path(output_path) / CONFIG_FILE).write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n",
                                                             encoding="utf-8")
            return
        write_files(self.pearl, Path(output_path), averaged_with=config.get("average_weight"),
                    metadata=config.get("metadata"))

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             **kwargs) -> "PearlSTModule":
        path = cls.load_dir_path(model_name_or_path, subfolder=subfolder, token=token, cache_folder=cache_folder,
                                 revision=revision, local_files_only=local_files_only)
        if path is None:
            raise FileNotFoundError(f"no PEARL export at {model_name_or_path!r} (subfolder {subfolder!r})")
        if Path(path).is_dir():
            _check(path)
        return cls(load_network(path, device="cpu"), str(path))  # SentenceTransformer moves it to its device


def _check(path: str) -> None:
    """The model directory door's checks (links, checksums.sha256, a half export) where pearl_model is
    installed, else the export's ``checksums.sha256`` alone (required where its pearl_model.json says
    it ships one, as every export's does). This
    file is the directory's own copy: it catches a damaged or half-copied export, not one whose code
    was rewritten (``pearl verify DIR`` before loading does). It runs only when sentence-transformers
    reads the export's own ``modules.json``: without it, nothing of the export's code runs
    (docs/using-the-model.md, "What checks a model")."""
    try:
        from pearl_model.inference.model_dirs import inspect_model_dir
    except ImportError:  # a machine without this project: the checksums, with the export's own code
        verify_export(path)
        return
    inspect_model_dir(path)
