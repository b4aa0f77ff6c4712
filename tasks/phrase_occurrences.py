"""Stage 4 (map): one chunk of `sentences` -> typed phrase occurrences, combined and bucketed.

Runs once per chunk (a slice of one sentences part) on a Dask worker: screens, parses and
entity-types the sentences, then combines occurrences of the same (phrase, lexical type,
entity type) within the chunk, so the reduce side reads counts, not raw occurrences.
Each chunk also writes what happened to every one of its sentences and occurrences, and,
with parser "pmi", the counts of its words by word bucket (`pmi_word_counts`, reduced to
corpus-wide totals before the phrase reducers score n-grams with them).

Each sentence's mining (`mine_sentences`, a function of its text) is kept in the `sentence_mining`
reuse store (storage/reuse.py), so the next dump's build mines only new and edited sentences; a
chunk's rows are combined from its sentences' results by the same `combine` either way.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from pearl_model.phrases.mining import backends as mining_backends
from pearl_model.phrases.mining import (
    MinedSentence, check_stats, combine, deferred_ner, mine_sentences, sentence_identity,
)
from storage.buckets import bucket_of, buckets_for
from storage.datasets import Dataset, dataset_version
from storage.reuse import (
    Keys, ReuseStore, commit_store, content_key, cpu_timed, encode_json, fetch, keys_of, library_versions, log_plan,
    plan_reuse, plan_store, write_entries,
)
from storage.schemas import PHRASE_MINING_STATS, PHRASE_OCCURRENCES, PMI_WORD_COUNTS

CODE_VERSION = "phrase-occurrences-2"
# Parser "pmi"'s candidates changed without the spaCy rules changing: only its datasets move.
PARSER_CODE_VERSIONS = {"pmi": "pmi-candidates-2"}
# phrase_occurrences rows per sentence kept (sample + ovos with the spaCy rules: 531,334 / 55,011 = 9.7;
# parser "pmi" offers every candidate n-gram: 41 on 600 sentences, benchmarks/pmi_phrases.py)
OCCURRENCE_ROWS_PER_SENTENCE = {"pmi": 40}
DEFAULT_ROWS_PER_SENTENCE = 10


def phrase_bucket_count(sentences: int, parser: str = "spacy") -> int:
    """The phrase reducers (and phrase-keyed parts) for ``sentences``, when ``phrase_buckets`` is unset."""
    return buckets_for(sentences, OCCURRENCE_ROWS_PER_SENTENCE.get(parser, DEFAULT_ROWS_PER_SENTENCE))


@dataclass(frozen=True)
class Chunk:
    index: int  # output part number
    part: int  # sentences part
    offset: int
    length: int


@dataclass(frozen=True)
class OccurrenceOutputs:
    occurrences: Dataset
    stats: Dataset
    word_counts: Dataset | None = None  # parser "pmi" only
    reuse: ReuseStore | None = None  # each sentence's mining kept for the next build (None: nothing to do)

    def datasets(self) -> list[Dataset]:
        return [d for d in (self.occurrences, self.word_counts, self.stats) if d is not None]

    def written(self) -> list[Dataset]:
        """What a chunk's task writes: the outputs, and the reuse store's part (before the stats)."""
        return [*self.datasets()[:-1], *([self.reuse.entries] if self.reuse is not None else []), self.stats]


phrase_bucket = bucket_of  # the phrase-count reducer a phrase key goes to


def plan_chunks(sentences: Dataset, sentences_per_chunk: int) -> list[Chunk]:
    """Slices of the sentences parts, so a big part still spreads over many workers. The parts come
    through Dataset.parts (a name outside the version is refused), their counts checked against the
    parts' footers (a count no part holds would plan chunks without end)."""
    chunks = []
    for part in sentences.parts(verify=True):
        for offset in range(0, part.rows, sentences_per_chunk):
            length = min(sentences_per_chunk, part.rows - offset)
            chunks.append(Chunk(len(chunks), part.index, offset, length))
    return chunks


def backends(params: dict):
    """The mining pass's parser and NER (no NER when the types come from example sentences)."""
    return mining_backends(params, entities=not deferred_ner(params))


def reuse_identity(params: dict) -> dict:
    settings, libraries = sentence_identity(params, entities=not deferred_ner(params))
    return {"stage": "phrase_occurrences", "code_version": code_version(params), **settings,
            "libraries": library_versions(*libraries)}


def read_chunk(sentences: Dataset, chunk: Chunk) -> tuple[list[int], list[str]]:
    table = sentences.read_part(chunk.part, columns=["sentence_id", "text"])
    table = table.slice(chunk.offset, chunk.length)
    return table["sentence_id"].to_pylist(), table["text"].to_pylist()


def sentence_keys(sentences: Dataset, chunk: Chunk) -> Keys:
    ids, texts = read_chunk(sentences, chunk)
    return keys_of(range(len(ids)), ids, map(content_key, texts))


def encode_mined(m: MinedSentence) -> bytes:
    return encode_json({"stats": dict(m.stats), "occurrences": m.occurrences, "words": m.words})


def decode_mined(value: bytes) -> MinedSentence:
    """A reuse entry's value back into a MinedSentence, or ValueError / TypeError / KeyError."""
    e = json.loads(value)
    if not isinstance(e, dict) or set(e) != {"stats", "occurrences", "words"}:
        raise ValueError("not a mined sentence")
    stats, occ, words = e["stats"], e["occurrences"], e["words"]
    if not (isinstance(stats, dict) and all(type(v) is int and v >= 0 for v in stats.values())
            and stats.get("sentences_in") == 1 and isinstance(occ, list)
            and all(isinstance(o, list) and len(o) == 4 and all(isinstance(x, str) for x in o) for o in occ)
            and (words is None or isinstance(words, list) and all(isinstance(w, str) for w in words))
            and stats.get("occurrences_kept", 0) == len(occ)):
        raise ValueError("not a mined sentence")
    try:
        check_stats(stats)
    except AssertionError as e:
        raise ValueError(str(e)) from None
    return MinedSentence([tuple(o) for o in occ], Counter(stats), words)


def mine_chunk(ids: list[int], texts: list[str], params: dict, word_counts: Counter | None = None,
               kept: dict[int, MinedSentence] | None = None
               ) -> tuple[pa.Table, dict, list[MinedSentence], float]:
    """One chunk's sentences mined: their combined occurrences, counts, each sentence's result, and
    the CPU seconds the mining took. ``kept``: position -> the sentence's result where known (reused);
    the others are mined."""
    kept = kept or {}
    todo = [i for i in range(len(texts)) if i not in kept]
    compute_s = 0.0
    if todo:
        parser, ner = backends(params)  # loaded once per process: not the sentences' cost
        mined, compute_s = cpu_timed(mine_sentences, [texts[i] for i in todo], parser, ner,
                                     max_sentence_chars=params["max_sentence_chars"], min_words=params["min_words"],
                                     max_words=params["max_words"], language=params["language"])
        kept = {**kept, **dict(zip(todo, mined))}
    each = [kept[i] for i in range(len(texts))]
    occurrences, stats = combine(each, word_counts)
    check_stats(stats)
    combined: dict[tuple, list] = defaultdict(lambda: [0, set()])
    for o in occurrences:
        slot = combined[(o.key, o.phrase, o.lexical_type, o.entity_type)]
        slot[0] += 1
        slot[1].add(ids[o.index])
    # The k smallest ids, not the first k seen: then the reducer's k smallest of the union
    # are the same however the sentences were cut into chunks.
    k = params["examples_per_phrase"]
    rows = [{"bucket": phrase_bucket(key, params["phrase_buckets"]), "phrase_key": key, "phrase": phrase,
             "lexical_type": lex, "entity_type": ent, "count": n, "sentence_ids": sorted(sids)[:k]}
            for (key, phrase, lex, ent), (n, sids) in combined.items()]
    return pa.Table.from_pylist(rows, schema=PHRASE_OCCURRENCES), dict(stats), each, compute_s


def word_count_rows(counts: Counter, buckets: int) -> pa.Table:
    return pa.Table.from_pylist([{"bucket": bucket_of(w, buckets), "word": w, "count": n} for w, n in counts.items()],
                                schema=PMI_WORD_COUNTS)


def write_chunk(sentences: Dataset, chunk: Chunk, out: OccurrenceOutputs, params: dict,
                refs: np.ndarray | None = None) -> dict:
    """Mine one chunk; a chunk whose outputs all exist is reused, not redone. ``refs``: this chunk's
    entry of the reuse plan (`plan_sentence_reuse`), sentences whose mining the previous store holds."""
    if all(d.has_part(chunk.index) for d in out.written()):
        return {"chunk": chunk.index, "reused": True}
    ids, texts = read_chunk(sentences, chunk)
    keys = [content_key(t) for t in texts] if out.reuse is not None else []
    kept, refused = fetch(out.reuse, refs, dict(enumerate(keys)), decode_mined) if keys and refs is not None \
        else ({}, 0)
    reused = len(kept)
    words = Counter() if out.word_counts is not None else None
    table, stats, each, compute_s = mine_chunk(ids, texts, params, words, kept)
    out.occurrences.write_part(chunk.index, table)
    if out.word_counts is not None:
        out.word_counts.write_part(chunk.index, word_count_rows(words, params["phrase_buckets"]))
    if out.reuse is not None:
        write_entries(out.reuse, chunk.index, keys, ids, [encode_mined(m) for m in each],
                      {"reused": reused, "computed": len(keys) - reused, "refused": refused, "compute_s": compute_s})
    # Stats last: their part marks the chunk done.
    out.stats.write_part(chunk.index, pa.Table.from_pylist(
        [{"chunk": chunk.index, "counter": k, "value": v} for k, v in sorted(stats.items())],
        schema=PHRASE_MINING_STATS))
    return {"chunk": chunk.index, "reused": False, "sentences_reused": reused, **stats}


def code_version(params: dict) -> str:
    extra = PARSER_CODE_VERSIONS.get(params["parser"])
    return f"{CODE_VERSION}+{extra}" if extra else CODE_VERSION


def plan_outputs(sentences: Dataset, params: dict) -> OccurrenceOutputs:
    inputs = {"sentences": sentences.version}

    def ds(name: str, schema: pa.Schema) -> Dataset:
        return Dataset(sentences.root, name, dataset_version(name, code_version(params), params, inputs), schema)

    out = OccurrenceOutputs(ds("phrase_occurrences", PHRASE_OCCURRENCES), ds("phrase_mining_stats", PHRASE_MINING_STATS),
                            ds("pmi_word_counts", PMI_WORD_COUNTS) if params["parser"] == "pmi" else None)
    if all(d.is_complete() for d in out.datasets()):
        return out
    return replace(out, reuse=plan_store(sentences.root, "sentence_mining", reuse_identity(params), inputs))


def plan_sentence_reuse(out: OccurrenceOutputs, keyed: list[Keys]) -> tuple[list[np.ndarray], dict]:
    """Per chunk, the sentences whose mining the previous store holds (`storage.reuse.match`), and the counts."""
    return plan_reuse(out.reuse, keyed)


def commit_outputs(out: OccurrenceOutputs, sentences: Dataset, params: dict, reuse_counts: dict | None = None) -> dict:
    """The outputs' manifests (the stats' returned), the reuse store's first."""
    if out.reuse is not None:
        commit_store(out.reuse, {"sentences": sentences.version}, reuse_counts or {})
    if all(d.is_complete() for d in out.datasets()):
        for d in out.datasets():
            d.reuse()
        return out.stats.manifest()
    totals = mining_totals_from_parts(out.stats)
    check_stats(totals)
    inputs, code = {"sentences": sentences.version}, code_version(params)
    for d in out.datasets()[:-1]:  # the stats last: their commit marks the stage done
        d.commit(code_version=code, params=params, inputs=inputs, stats=totals)
    return out.stats.commit(code_version=code, params=params, inputs=inputs, stats=totals)


def mining_totals_from_parts(stats: Dataset) -> dict:
    totals: dict[str, int] = defaultdict(int)
    for part in stats.written_parts():
        t = stats.read_part(part)
        for k, v in zip(t["counter"].to_pylist(), t["value"].to_pylist()):
            totals[k] += v
    return dict(sorted(totals.items()))


from prefect import task, unmapped  # noqa: E402
from prefect.artifacts import create_table_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402

from runs.artifacts import publish  # noqa: E402
from runs.steps import PREFECT, Steps  # noqa: E402
from storage.reuse import counts_table  # noqa: E402


@task(name="plan-phrase-occurrences", cache_policy=NONE)
def plan_occurrences_task(sentences: Dataset, params: dict) -> tuple[OccurrenceOutputs, list[Chunk]]:
    out = plan_outputs(sentences, params)
    if not all(d.is_complete() for d in out.datasets()):
        # Load the parser and NER here once, so a missing model fails the run before any
        # work is mapped, with ModelMissing's message saying what to install.
        backends(params)
    return out, plan_chunks(sentences, params["sentences_per_chunk"])


@task(name="sentence-keys", task_run_name="sentence-keys-{chunk.index}", cache_policy=NONE, retries=1)
def sentence_keys_task(sentences: Dataset, chunk: Chunk, out: OccurrenceOutputs) -> Keys:
    if out.reuse is None or out.reuse.entries.is_complete():  # nothing to mine
        return keys_of((), (), ())
    return sentence_keys(sentences, chunk)


@task(name="plan-sentence-reuse", cache_policy=NONE)
def plan_sentence_reuse_task(out: OccurrenceOutputs, keyed: list[Keys]) -> tuple[list[np.ndarray], dict]:
    refs, counts = plan_sentence_reuse(out, keyed)
    log_plan(out.reuse, counts, "sentence mining", get_run_logger())
    return refs, counts


@task(name="mine-phrases", task_run_name="mine-phrases-{chunk.index}", cache_policy=NONE, retries=1)
def mine_chunk_task(sentences: Dataset, chunk: Chunk, out: OccurrenceOutputs, params: dict, refs: np.ndarray) -> dict:
    result = write_chunk(sentences, chunk, out, params, refs)
    get_run_logger().info("chunk %d: %s", chunk.index, result)
    return result


@task(name="commit-phrase-occurrences", cache_policy=NONE)
def commit_occurrences_task(out: OccurrenceOutputs, sentences: Dataset, params: dict, reuse_counts: dict) -> dict:
    manifest = commit_outputs(out, sentences, params, reuse_counts)
    if out.reuse is not None:
        publish(create_table_artifact, counts_table(out.reuse.entries.manifest()["stats"]), key="sentence-reuse",
                description="Sentences whose mining was reused from the previous build's sentence_mining, and computed")
    return manifest


def occurrences_stage(sentences: Dataset, params: dict, *, steps: Steps = PREFECT) -> OccurrenceOutputs:
    """The stage in its flow: sentences -> phrase_occurrences (+ stats, + PMI word counts), one
    mining task per chunk of sentences, each reusing the mining of the sentences the previous
    build's `sentence_mining` holds (their keys first, one task per chunk, then matched in the flow)."""
    steps.stage("phrase_occurrences")
    steps.load(backends, params, in_flow=True)  # the plan loads them too
    mined, chunks = steps.call(plan_occurrences_task, sentences, params)
    keyed = steps.map(sentence_keys_task, unmapped(sentences), chunks, unmapped(mined))
    refs, counts = steps.call(plan_sentence_reuse_task, mined, keyed)
    steps.map(mine_chunk_task, unmapped(sentences), chunks, unmapped(mined), unmapped(params), refs)
    steps.call(commit_occurrences_task, mined, sentences, params, counts)
    return mined
