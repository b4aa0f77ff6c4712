"""Stage 5 (reduce): `phrase_occurrences` -> `phrases`, one bucket of phrase keys per task.

Occurrences were bucketed by phrase key on the map side, so each reducer holds every
occurrence of its phrases and no process ever holds the whole corpus's. Per phrase:
frequency = all its occurrences; lexical and entity type = majority over occurrences;
shown form = most frequent surface spelling (ties: the smallest string).

Parser "pmi": the chunks' word counts are first reduced per word bucket into `pmi_word_totals`
(the words seen at least ``min_freq`` times, and the count of all words); each phrase reducer
then also drops the multi-word n-grams whose normalised PMI is below ``pmi_min_npmi``
(pearl_model.phrases.pmi). A run where no n-gram passes says how many passed each filter.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

from pearl_model.phrases import labels
from pearl_model.phrases.entity_types import majority_entity_type, majority_lexical_type
from pearl_model.phrases.mining import deferred_ner
from storage.datasets import Dataset, dataset_version
from storage.schemas import PHRASES, PMI_WORD_TOTALS

CODE_VERSION = "phrases-1"


PMI_FILTERS = ("ngrams_scored", "ngrams_filtered_below_min_freq", "ngrams_filtered_below_npmi",
               "ngrams_filtered_word_unknown", "ngrams_kept")


# --- parser "pmi": corpus-wide word counts -------------------------------------------------------

def plan_word_totals(word_counts: Dataset, params: dict) -> Dataset:
    version = dataset_version("pmi_word_totals", CODE_VERSION, params, {"pmi_word_counts": word_counts.version})
    return Dataset(word_counts.root, "pmi_word_totals", version, PMI_WORD_TOTALS)


def write_word_totals(word_counts: Dataset, bucket: int, out: Dataset, params: dict) -> dict:
    """One word bucket summed; words below min_freq left out, but counted into total_words."""
    if out.has_part(bucket):
        return {"bucket": bucket, "reused": True, **(out.part_metadata(bucket) or {})}
    t = word_counts.read_bucket(bucket, ["word", "count"]).group_by("word").aggregate([("count", "sum")])
    kept = t.filter(pc.greater_equal(t["count_sum"], params["min_freq"]))
    stats = {"total_words": pc.sum(t["count_sum"]).as_py() or 0, "distinct_words": t.num_rows,
             "words_kept": kept.num_rows}
    out.write_part(bucket, pa.table({"word": kept["word"], "count": kept["count_sum"]}, schema=PMI_WORD_TOTALS),
                   metadata=stats)
    return {"bucket": bucket, "reused": False, **stats}


def commit_word_totals(out: Dataset, word_counts: Dataset, params: dict) -> dict:
    if out.is_complete():
        return out.reuse()
    return out.commit(code_version=CODE_VERSION, params=params, inputs={"pmi_word_counts": word_counts.version},
                      stats=dict(out.metadata_totals()))


@lru_cache(maxsize=1)
def _word_totals(totals: Dataset) -> tuple[dict[str, int], int]:
    # Once per reducer process: every bucket's n-grams draw on words of every word bucket.
    t = totals.read(columns=["word", "count"])
    return dict(zip(t["word"].to_pylist(), t["count"].to_pylist())), totals.manifest()["stats"]["total_words"]


def pmi_filter(freq: Counter, min_freq: int, min_npmi: float, totals: dict[str, int],
               total_words: int) -> tuple[set[str], Counter]:
    """The multi-word keys that fail the PMI filter, and how many n-grams each filter took."""
    from pearl_model.phrases.pmi import pmi_words, score_key

    dropped, stats = set(), Counter({k: 0 for k in PMI_FILTERS})
    for key, n in freq.items():
        if len(pmi_words(key)) < 2:
            continue  # a single word: kept by frequency alone
        stats["ngrams_scored"] += 1
        if n < min_freq:
            stats["ngrams_filtered_below_min_freq"] += 1
            continue  # the frequency filter drops it anyway
        score = score_key(key, n, totals, total_words)
        if score is None:
            stats["ngrams_filtered_word_unknown"] += 1
            dropped.add(key)
        elif score < min_npmi:
            stats["ngrams_filtered_below_npmi"] += 1
            dropped.add(key)
        else:
            stats["ngrams_kept"] += 1
    return dropped, stats


def reduce_rows(rows: pa.Table, min_freq: int, examples: int,
                pmi: tuple[float, dict[str, int], int] | None = None) -> tuple[list[dict], dict]:
    """Aggregate one bucket's combined occurrences into phrases, keeping frequent ones (and, with
    ``pmi`` = (min_npmi, word totals, total words), multi-word ones that pass the PMI filter)."""
    freq: Counter = Counter()
    forms: dict[str, Counter] = defaultdict(Counter)
    lex: dict[str, Counter] = defaultdict(Counter)
    ent: dict[str, Counter] = defaultdict(Counter)
    sids: dict[str, set] = defaultdict(set)
    for key, phrase, lt, et, n, ids in zip(*(rows[c].to_pylist() for c in (
            "phrase_key", "phrase", "lexical_type", "entity_type", "count", "sentence_ids"))):
        freq[key] += n
        forms[key][phrase] += n
        lex[key][lt] += n
        ent[key][et] += n
        sids[key].update(ids)
    dropped, pmi_stats = pmi_filter(freq, min_freq, *pmi) if pmi is not None else (set(), Counter())
    out = []
    for key, n in freq.items():
        if n < min_freq or key in dropped:
            continue
        lt, et = majority_lexical_type(lex[key]), majority_entity_type(ent[key])
        form = min(forms[key], key=lambda f: (-forms[key][f], f))
        lab = labels.label(lt, et)
        out.append({"phrase": form, "phrase_key": key, "lexical_type": lt, "entity_type": et, "label": lab,
                    "label_id": labels.label_id(lab), "frequency": n,
                    "example_sentence_ids": sorted(sids[key])[:examples]})
    out.sort(key=lambda r: (-r["frequency"], r["phrase_key"]))
    stats = {"distinct_phrases": len(freq), "phrases_kept": len(out),
             "phrases_filtered_below_min_freq": len(freq) - len(out) - len(dropped),
             "occurrences_in": sum(freq.values()), **pmi_stats}
    if pmi is not None:
        stats["phrases_filtered_pmi"] = len(dropped)
    return out, stats


def bucket_counts(rows: pa.Table, min_freq: int) -> dict:
    freq = rows.group_by("phrase_key").aggregate([("count", "sum")])["count_sum"]
    kept = pc.sum(pc.greater_equal(freq, min_freq).cast(pa.int64())).as_py() or 0
    return {"distinct_phrases": len(freq), "phrases_kept": kept,
            "phrases_filtered_below_min_freq": len(freq) - kept,
            "occurrences_in": pc.sum(freq).as_py() or 0}


def write_bucket(occurrences: Dataset, bucket: int, out: Dataset, params: dict,
                 word_totals: Dataset | None = None) -> dict:
    """Reduce one bucket; a finished bucket is reused, with the counts it was written with
    (a part from before the counts were kept: recomputed from the input, frequency only)."""
    if out.has_part(bucket):
        meta = out.part_metadata(bucket)
        return {"bucket": bucket, "reused": True, **(meta if meta is not None else bucket_counts(
            occurrences.read_bucket(bucket, ["phrase_key", "count"]), params["min_freq"]))}
    rows = occurrences.read_bucket(bucket)
    pmi = (params["pmi_min_npmi"], *_word_totals(word_totals)) if word_totals is not None else None
    phrases, stats = reduce_rows(rows, params["min_freq"], params["examples_per_phrase"], pmi)
    out.write_part(bucket, pa.Table.from_pylist(phrases, schema=PHRASES), metadata=stats)
    return {"bucket": bucket, "reused": False, **stats}


def _inputs(occurrences: Dataset, word_totals: Dataset | None) -> dict:
    return {"phrase_occurrences": occurrences.version} | (
        {"pmi_word_totals": word_totals.version} if word_totals is not None else {})


def plan_phrases(occurrences: Dataset, params: dict, word_totals: Dataset | None = None) -> Dataset:
    """`phrases`, or with ``ner_scope: examples`` `untyped_phrases` (tasks/phrase_types.py types them)."""
    name = "untyped_phrases" if deferred_ner(params) else "phrases"
    version = dataset_version(name, CODE_VERSION, params, _inputs(occurrences, word_totals))
    return Dataset(occurrences.root, name, version, PHRASES)


def commit_phrases(out: Dataset, occurrences: Dataset, params: dict, bucket_stats: list[dict],
                   word_totals: Dataset | None = None) -> dict:
    if out.is_complete():
        return out.reuse()
    stats = Counter()
    for b in bucket_stats:
        stats.update({k: v for k, v in b.items() if k not in ("bucket", "reused")})
    if word_totals is not None and stats["ngrams_kept"] == 0:
        raise ValueError("parser 'pmi': no n-gram passed the filters (" + ", ".join(
            f"{k} {stats[k]}" for k in PMI_FILTERS) + f"; pmi_min_npmi {params['pmi_min_npmi']}, min_freq "
            f"{params['min_freq']}): the corpus is too small for these thresholds")
    stats["buckets_reused"] = sum(1 for b in bucket_stats if b["reused"])
    return out.commit(code_version=CODE_VERSION, params=params, inputs=_inputs(occurrences, word_totals),
                      stats=dict(stats), extra={"labels": labels.vocabulary()})


from prefect import task, unmapped  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402

from runs.steps import PREFECT, Steps  # noqa: E402


@task(name="plan-pmi-word-totals", cache_policy=NONE)
def plan_word_totals_task(word_counts: Dataset, params: dict) -> Dataset:
    return plan_word_totals(word_counts, params)


@task(name="pmi-word-bucket", task_run_name="pmi-word-bucket-{bucket}", cache_policy=NONE, retries=1)
def word_totals_bucket_task(word_counts: Dataset, bucket: int, out: Dataset, params: dict) -> dict:
    return write_word_totals(word_counts, bucket, out, params)


@task(name="commit-pmi-word-totals", cache_policy=NONE)
def commit_word_totals_task(out: Dataset, word_counts: Dataset, params: dict) -> dict:
    return commit_word_totals(out, word_counts, params)


@task(name="plan-phrases", cache_policy=NONE)
def plan_phrases_task(occurrences: Dataset, params: dict, word_totals: Dataset | None = None) -> Dataset:
    return plan_phrases(occurrences, params, word_totals)


@task(name="phrase-bucket", task_run_name="phrase-bucket-{bucket}", cache_policy=NONE, retries=1)
def phrase_bucket_task(occurrences: Dataset, bucket: int, out: Dataset, params: dict,
                       word_totals: Dataset | None = None) -> dict:
    return write_bucket(occurrences, bucket, out, params, word_totals)


@task(name="commit-phrases", cache_policy=NONE)
def commit_phrases_task(out: Dataset, occurrences: Dataset, params: dict, bucket_stats: list[dict],
                        word_totals: Dataset | None = None) -> dict:
    return commit_phrases(out, occurrences, params, bucket_stats, word_totals)


def phrases_stage(occurrences: Dataset, word_counts: Dataset | None, params: dict, buckets: int, *,
                  steps: Steps = PREFECT) -> tuple[Dataset, dict]:
    """The stage in its flow: phrase_occurrences -> phrases, one reduce task per phrase bucket
    (parser "pmi": the word counts reduced to pmi_word_totals first); returns the phrases and
    their committed manifest."""
    word_totals = None
    if word_counts is not None:
        steps.stage("pmi_word_totals")
        word_params = {"min_freq": params["min_freq"]}
        word_totals = steps.call(plan_word_totals_task, word_counts, word_params)
        steps.map(word_totals_bucket_task, unmapped(word_counts), range(buckets), unmapped(word_totals),
                  unmapped(word_params))
        steps.call(commit_word_totals_task, word_totals, word_counts, word_params)
    steps.stage("phrases")
    phrases = steps.call(plan_phrases_task, occurrences, params, word_totals)
    bucket_stats = steps.map(phrase_bucket_task, unmapped(occurrences), range(buckets), unmapped(phrases),
                             unmapped(params), unmapped(word_totals))
    return phrases, steps.call(commit_phrases_task, phrases, occurrences, params, bucket_stats, word_totals)
