"""Stage 9: `phrases` + `augmentations` + `negatives` -> `training_set`, the published version.

The three inputs share their partitioning (part i holds the phrases of bucket i), so each
part is joined on its own, with no shuffle. The split is a hash of the phrase key, so a
phrase stays on its side of the split when the corpus grows. The training flow reads the
version named in `training_set/_latest.json` unless it is given one.
"""
from __future__ import annotations

import zlib
from collections import Counter, defaultdict

import pyarrow as pa

from pearl_model.phrases import labels
from storage.datasets import Dataset, dataset_version
from storage.schemas import TRAINING_SET

CODE_VERSION = "training-set-1"


def split_of(key: str, validation_fraction: float) -> str:
    return "validation" if zlib.crc32(key.encode("utf-8")) % 10_000 < validation_fraction * 10_000 else "train"


def _part(d: Dataset, i: int, columns: list[str]) -> pa.Table:
    return d.read_part(i, columns=columns) if d.has_part(i) else d.schema.empty_table().select(columns)


def join_part(phrases: Dataset, augmentations: Dataset, negatives: Dataset, part: int, params: dict) -> pa.Table:
    p = _part(phrases, part, ["phrase", "phrase_key", "label", "label_id", "frequency"])
    a = _part(augmentations, part, ["phrase_key", "kind", "positive", "rank"])
    n = _part(negatives, part, ["phrase_key", "negative", "rank"])
    positives: dict[str, list] = defaultdict(list)
    for key, kind, text, rank in sorted(zip(*(a[c].to_pylist() for c in ("phrase_key", "kind", "positive", "rank"))),
                                        key=lambda r: (r[0], r[1], r[3])):
        positives[key].append({"kind": kind, "text": text})
    negs: dict[str, list] = defaultdict(list)
    for key, text, rank in sorted(zip(*(n[c].to_pylist() for c in ("phrase_key", "negative", "rank"))),
                                  key=lambda r: (r[0], r[2])):
        negs[key].append(text)
    rows = [{**r, "positives": positives.get(r["phrase_key"], []), "negatives": negs.get(r["phrase_key"], []),
             "split": split_of(r["phrase_key"], params["validation_fraction"])} for r in p.to_pylist()]
    return pa.Table.from_pylist(rows, schema=TRAINING_SET)


def write_part(phrases: Dataset, augmentations: Dataset, negatives: Dataset, part: int, out: Dataset,
               params: dict) -> int:
    if out.has_part(part):
        return -1
    return out.write_part(part, join_part(phrases, augmentations, negatives, part, params))


def plan_training_set(phrases: Dataset, augmentations: Dataset, negatives: Dataset, params: dict) -> Dataset:
    inputs = {"phrases": phrases.version, "augmentations": augmentations.version, "negatives": negatives.version}
    return Dataset(phrases.root, "training_set", dataset_version("training_set", CODE_VERSION, params, inputs),
                   TRAINING_SET)


def commit_training_set(out: Dataset, phrases: Dataset, augmentations: Dataset, negatives: Dataset,
                        params: dict) -> dict:
    if out.is_complete():
        return out.manifest()
    import pyarrow.parquet as pq

    stats: Counter = Counter()
    for f in out.parts_on_disk():
        t = pq.read_table(f, columns=["split", "positives", "negatives"], filesystem=out.fs)
        stats.update(f"phrases_{s}" for s in t["split"].to_pylist())
        stats["phrases_without_cached_positive"] += sum(1 for x in t["positives"].to_pylist() if not x)
        stats["phrases_without_negative"] += sum(1 for x in t["negatives"].to_pylist() if not x)
    inputs = {"phrases": phrases.version, "augmentations": augmentations.version, "negatives": negatives.version}
    return out.commit(code_version=CODE_VERSION, params=params, inputs=inputs, stats=dict(stats),
                      extra={"labels": labels.vocabulary()})


from prefect import task  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402


@task(name="plan-training-set", cache_policy=NONE)
def plan_training_set_task(phrases: Dataset, augmentations: Dataset, negatives: Dataset, params: dict) -> Dataset:
    return plan_training_set(phrases, augmentations, negatives, params)


@task(name="training-set-part", task_run_name="training-set-part-{part}", cache_policy=NONE, retries=1)
def training_set_part_task(phrases: Dataset, augmentations: Dataset, negatives: Dataset, part: int, out: Dataset,
                           params: dict) -> int:
    return write_part(phrases, augmentations, negatives, part, out, params)


@task(name="publish-training-set", cache_policy=NONE)
def commit_training_set_task(out: Dataset, phrases: Dataset, augmentations: Dataset, negatives: Dataset,
                             params: dict) -> dict:
    from prefect.artifacts import create_link_artifact

    man = commit_training_set(out, phrases, augmentations, negatives, params)
    create_link_artifact(key="training-set", link=out.url, link_text=f"training_set {out.version}",
                         description=f"{man['rows']} phrases: {man['stats']}")
    return man
