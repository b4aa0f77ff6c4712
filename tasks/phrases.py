"""Stage 5 (reduce): `phrase_occurrences` -> `phrases`, one bucket of phrase keys per task.

Occurrences were bucketed by phrase key on the map side, so each reducer holds every
occurrence of its phrases and no process ever holds the whole corpus's. Per phrase:
frequency = all its occurrences; lexical and entity type = majority over occurrences;
shown form = most frequent surface spelling (ties: the smallest string).
"""
from __future__ import annotations

from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from pearl_model.phrases import labels
from pearl_model.phrases.entity_types import majority_entity_type, majority_lexical_type
from storage.datasets import Dataset, dataset_version
from storage.schemas import PHRASES

CODE_VERSION = "phrases-1"


def reduce_rows(rows: pa.Table, min_freq: int, examples: int) -> tuple[list[dict], dict]:
    """Aggregate one bucket's combined occurrences into phrases, keeping frequent ones."""
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
    out = []
    for key, n in freq.items():
        if n < min_freq:
            continue
        lt, et = majority_lexical_type(lex[key]), majority_entity_type(ent[key])
        form = min(forms[key], key=lambda f: (-forms[key][f], f))
        lab = labels.label(lt, et)
        out.append({"phrase": form, "phrase_key": key, "lexical_type": lt, "entity_type": et, "label": lab,
                    "label_id": labels.label_id(lab), "frequency": n,
                    "example_sentence_ids": sorted(sids[key])[:examples]})
    out.sort(key=lambda r: (-r["frequency"], r["phrase_key"]))
    stats = {"distinct_phrases": len(freq), "phrases_kept": len(out),
             "phrases_filtered_below_min_freq": len(freq) - len(out), "occurrences_in": sum(freq.values())}
    return out, stats


def bucket_counts(rows: pa.Table, min_freq: int) -> dict:
    freq = rows.group_by("phrase_key").aggregate([("count", "sum")])["count_sum"]
    kept = pc.sum(pc.greater_equal(freq, min_freq).cast(pa.int64())).as_py() or 0
    return {"distinct_phrases": len(freq), "phrases_kept": kept,
            "phrases_filtered_below_min_freq": len(freq) - kept,
            "occurrences_in": pc.sum(freq).as_py() or 0}


def write_bucket(occurrences: Dataset, bucket: int, out: Dataset, params: dict) -> dict:
    """Reduce one bucket; a finished bucket is reused, its counts recomputed from the input."""
    if out.has_part(bucket):
        return {"bucket": bucket, "reused": True,
                **bucket_counts(occurrences.read_bucket(bucket, ["phrase_key", "count"]), params["min_freq"])}
    rows = occurrences.read_bucket(bucket)
    phrases, stats = reduce_rows(rows, params["min_freq"], params["examples_per_phrase"])
    out.write_part(bucket, pa.Table.from_pylist(phrases, schema=PHRASES))
    return {"bucket": bucket, "reused": False, **stats}


def plan_phrases(occurrences: Dataset, params: dict) -> Dataset:
    version = dataset_version("phrases", CODE_VERSION, params, {"phrase_occurrences": occurrences.version})
    return Dataset(occurrences.root, "phrases", version, PHRASES)


def commit_phrases(out: Dataset, occurrences: Dataset, params: dict, bucket_stats: list[dict]) -> dict:
    if out.is_complete():
        return out.manifest()
    keys = ("distinct_phrases", "phrases_kept", "phrases_filtered_below_min_freq", "occurrences_in")
    stats = {k: sum(b[k] for b in bucket_stats) for k in keys}
    stats["buckets_reused"] = sum(1 for b in bucket_stats if b["reused"])
    return out.commit(code_version=CODE_VERSION, params=params, inputs={"phrase_occurrences": occurrences.version},
                      stats=stats, extra={"labels": labels.vocabulary()})


from prefect import task  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402


@task(name="plan-phrases", cache_policy=NONE)
def plan_phrases_task(occurrences: Dataset, params: dict) -> Dataset:
    return plan_phrases(occurrences, params)


@task(name="phrase-bucket", task_run_name="phrase-bucket-{bucket}", cache_policy=NONE, retries=1)
def phrase_bucket_task(occurrences: Dataset, bucket: int, out: Dataset, params: dict) -> dict:
    return write_bucket(occurrences, bucket, out, params)


@task(name="commit-phrases", cache_policy=NONE)
def commit_phrases_task(out: Dataset, occurrences: Dataset, params: dict, bucket_stats: list[dict]) -> dict:
    return commit_phrases(out, occurrences, params, bucket_stats)
