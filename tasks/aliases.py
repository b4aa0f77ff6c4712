"""Stage 3: reduce `alias_mentions` into `aliases`, one bucket per task.

Mentions are bucketed by alias text on the map side, so each (alias, title, source)
is summed in exactly one reducer. Anchors that point at a redirect are resolved to the
redirect's target: each reducer fetches just the redirects its anchors point at, with
a filtered scan, so no process ever holds the whole redirect table.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from storage.datasets import Dataset
from storage.schemas import ALIASES

CODE_VERSION = "aliases-2"


def reduce_bucket(mentions: Dataset, bucket: int) -> pa.Table:
    """Aliases of one bucket: summed counts, anchor targets resolved through redirects."""
    rows = mentions.read_bucket(bucket)
    anchors = rows.filter(pc.equal(rows["source"], "anchor"))
    targets = pc.unique(anchors["target"])
    if len(targets):
        redirects = mentions.read(
            columns=["alias", "target"],
            filter=(pads.field("source") == "redirect") & pads.field("alias").isin(targets),
        )
        resolve = dict(zip(redirects["alias"].to_pylist(), redirects["target"].to_pylist()))
    else:
        resolve = {}
    # Only anchors are resolved: a redirect row keeps its own target, whichever anchors
    # happen to share its bucket (else the output would depend on the bucket count).
    resolved = [resolve.get(t, t) if src == "anchor" else t
                for t, src in zip(rows["target"].to_pylist(), rows["source"].to_pylist())]
    rows = rows.set_column(rows.schema.get_field_index("target"), "target", pa.array(resolved, pa.string()))
    # A link that resolves to a page of the same name is not an alternative name.
    same = pc.equal(pc.utf8_lower(rows["alias"]), pc.utf8_lower(rows["target"]))
    rows = rows.filter(pc.invert(same))
    grouped = rows.group_by(["alias", "target", "source"]).aggregate([("count", "sum")])
    table = pa.table(
        {
            "alias": grouped["alias"],
            "title": grouped["target"],
            "source": grouped["source"],
            "count": grouped["count_sum"],
        }
    )
    return table.sort_by([("title", "ascending"), ("count", "descending"), ("alias", "ascending")]).cast(ALIASES)


def write_alias_bucket(mentions: Dataset, bucket: int, out: Dataset) -> int:
    if out.has_part(bucket):
        return -1
    return out.write_part(bucket, reduce_bucket(mentions, bucket))


def plan_aliases(mentions: Dataset, params: dict) -> Dataset:
    from storage.datasets import dataset_version

    version = dataset_version("aliases", CODE_VERSION, params, {"alias_mentions": mentions.version})
    return Dataset(mentions.root, "aliases", version, ALIASES)


from prefect import task, unmapped  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402

from runs.steps import PREFECT, Steps  # noqa: E402


@task(name="plan-aliases", cache_policy=NONE)
def plan_aliases_task(mentions: Dataset, params: dict) -> Dataset:
    return plan_aliases(mentions, params)


@task(name="alias-bucket", task_run_name="alias-bucket-{bucket}", cache_policy=NONE, retries=1)
def alias_bucket_task(mentions: Dataset, bucket: int, out: Dataset) -> int:
    return write_alias_bucket(mentions, bucket, out)


@task(name="commit-aliases", cache_policy=NONE)
def commit_aliases_task(out: Dataset, mentions: Dataset, params: dict) -> dict:
    if out.is_complete():
        return out.reuse()
    return out.commit(code_version=CODE_VERSION, params=params, inputs={"alias_mentions": mentions.version})


def aliases_stage(mentions: Dataset, params: dict, *, steps: Steps = PREFECT) -> Dataset:
    """The stage in its flow: alias_mentions -> aliases, one reduce task per alias bucket."""
    steps.stage("aliases")
    aliases = steps.call(plan_aliases_task, mentions, params)
    steps.map(alias_bucket_task, unmapped(mentions), range(params["alias_buckets"]), unmapped(aliases))
    steps.call(commit_aliases_task, aliases, mentions, params)
    return aliases
