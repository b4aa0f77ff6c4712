"""The whole PEARL model (backbone + character branch) as one sentence-transformers input module.

A directory written by :func:`pearl_model.export.export_pearl` carries a ``modules.json`` of
two modules: this :class:`PearlSTModule` (saved in the directory's root; it loads the whole
export with :func:`~pearl_model.export.load_pearl`, tokenises with our
:class:`~pearl_model.model.Batcher` into ``input_ids, attention_mask, char_ids, word_mask``
and outputs ``sentence_embedding``, the unnormalised concatenation) followed by
sentence-transformers' own ``Normalize``. So a sentence-transformers user gets exactly the
vectors of ``load_pearl(path).encode(...)``::

    pip install pearl-pipeline            # or have this checkout on the path: pearl_model must import
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("path/to/export", device="cpu", trust_remote_code=True)
    vectors = model.encode(["heart attack", "myocardial infarction"])

How sentence-transformers (5.x) finds the class: ``modules.json`` names it by its import path
``pearl_model.st_module.PearlSTModule``; as that is outside the ``sentence_transformers.*``
namespace, the library imports it only from an installed ``pearl_model`` (no code is copied
into the export). Version 5.7 still trusts a local directory without ``trust_remote_code``;
from 6.0 a class outside its namespace needs ``trust_remote_code=True``, hence the flag above.
Needs sentence-transformers >= 5 (the ``InputModule``/``preprocess`` API).

The query prefix (E5: ``"query: "``) is built in, so the export declares no prompts. An
explicit ``prompt=`` given to ``encode`` is put before that prefix, for the backbone only:
the character branch always reads the phrase's own words.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from sentence_transformers.base.modules.input_module import InputModule

from pearl_model.export import load_pearl, write_files
from pearl_model.model import PearlModel, collate

__all__ = ["PearlSTModule"]


class PearlSTModule(InputModule):
    """Phrases -> PEARL features -> ``sentence_embedding`` (and ``type_logits``), unnormalised."""

    config_file_name = "sentence_bert_config.json"  # the root's config.json is the backbone's
    config_keys = ["max_seq_length"]
    save_in_root = True

    def __init__(self, pearl: PearlModel):
        super().__init__()
        if pearl.batcher is None:
            raise ValueError("PearlSTModule needs a PearlModel with a batcher (tokenizer + char vocabulary)")
        self.pearl = pearl

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
        return cls(load_pearl(path, device="cpu"))  # SentenceTransformer moves it to its device
