"""`link`: the names of two tables (or one against itself) -> the versioned `matches` dataset
(`deduped_matches` with dedupe) and its report, by partitions on Dask (tasks/matches.py)."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from prefect import unmapped
from pydantic import Field

from flows.dask_runner import dask_run_records, dask_task_runner
from flows.parameters import Text, flow
from pearl_model.linking.rescore import COSINE_WEIGHT
from tasks.matches import (
    EXACT_LIMIT, MAX_ROW_BYTES, PARTITION_ROWS, RECALL_SAMPLE, check_labels_task, choose_threshold_task,
    encode_part_task, index_right_task, link_report_task, plan_link_task, query_left_task, split_side_task,
    tuning_sample_task, write_matches_task,
)


@flow(name="link-stages")
def link_stages(left: str, right: Optional[str], storage_root: str, settings: dict) -> dict:
    with dask_run_records(storage_root):
        plan, reused = plan_link_task(left, right, storage_root, settings)
        if reused is not None:
            return link_report_task(reused, storage_root)
        left_future = split_side_task.submit(plan, "left")
        right_parts = split_side_task.submit(plan, "right").result() if right is not None else None
        left_parts = left_future.result()
        right_parts = right_parts or left_parts  # dedupe: the table is both sides
        check_labels_task(plan, left_parts, right_parts)  # bad labels fail before any model loads
        sample = tuning_sample_task(plan, left_parts, right_parts)
        # Submitted in the order the workers should prefer (Dask runs the earliest submitted ready task
        # first): the right side's vectors, its indexes as soon as they are ready, the left side's vectors
        # meanwhile, then the queries. With dedupe the left side's vectors are the right side's,
        # gathered before the indexes take them over.
        right_vectors = encode_part_task.map(unmapped(plan), "right", range(right_parts.parts), unmapped(right_parts))
        gathered = encode_part_task.map(unmapped(plan), "left", range(left_parts.parts), unmapped(right_parts),
                                        wait_for=[right_vectors]) if right is None else []
        shards = index_right_task.map(unmapped(plan), range(plan.shards(right_parts.parts)), unmapped(right_parts),
                                      unmapped(sample), wait_for=[right_vectors, gathered])
        left_vectors = gathered or encode_part_task.map(unmapped(plan), "left", range(left_parts.parts),
                                                        unmapped(right_parts))
        recall = query_left_task.map(unmapped(plan), range(left_parts.parts), unmapped(right_parts), unmapped(shards),
                                     wait_for=[left_vectors]).result()
        threshold = choose_threshold_task(plan, left_parts.parts)
        manifest = write_matches_task(plan, left_parts, right_parts, threshold, recall, shards)
        return link_report_task(manifest, storage_root)


@flow(name="link")
def link(
    left: Text,
    right: Optional[Text] = None,
    left_column: Text = "title",
    right_column: Text = "title",
    model: Text = "current",
    top_k: Annotated[int, Field(ge=1)] = 1,
    threshold: Optional[float] = None,
    cosine_weight: Annotated[float, Field(ge=0.0, le=1.0)] = COSINE_WEIGHT,
    labels: Optional[Text] = None,
    precision: Annotated[float, Field(ge=0.0, le=1.0)] = 0.9,
    dedupe: bool = False,
    storage_root: Text = "data",
    partition_rows: Annotated[int, Field(ge=1)] = PARTITION_ROWS,
    index_rows: Optional[Annotated[int, Field(ge=1)]] = None,
    index_kind: Literal["auto", "exact", "hnsw"] = "auto",
    exact_limit: Annotated[int, Field(ge=0)] = EXACT_LIMIT,
    recall_sample: Annotated[int, Field(ge=0)] = RECALL_SAMPLE,
    ef_search: Optional[Annotated[int, Field(ge=1)]] = None,
    recall_target: Optional[Annotated[float, Field(gt=0.0, le=1.0)]] = None,
    batch_size: Optional[Annotated[int, Field(ge=1)]] = None,
    max_row_bytes: Annotated[int, Field(ge=1)] = MAX_ROW_BYTES,
    dask_address: Optional[Text] = None,
    dask_workers: Annotated[int, Field(ge=1)] = 2,
) -> dict:
    """Match the names of a column of LEFT to their closest names in RIGHT (or of one table against
    itself with dedupe) into a versioned Parquet dataset: rows left_row, right_row, left, right,
    score, rank (rows are 0-based rows of the tables; rank 1 is the best), plus cluster with dedupe.

    Args:
        left: a CSV or Parquet table (by its suffix; a path or any fsspec URL).
        right: the table to match left's names against (none with dedupe).
        left_column: left's column of names.
        right_column: right's column of names.
        model: current (the registry's current model under storage_root; the E5 backbone before the
            first promotion), a backbone spec or a model directory: as `pearl link --model`.
        top_k: matches kept per left row, best first.
        threshold: drop matches scoring below it.
        cosine_weight: the score: this weight on the cosine, the rest on rapidfuzz's token_set_ratio
            of the best candidates by cosine (1: the cosine alone; the default was chosen on the
            AutoFJ tasks, docs/research/eval-link-autofj.md).
        labels: a random sample of left's names (a CSV or Parquet table, columns left, right), each
            with its partner in right or an empty right cell (it has none): the threshold is chosen
            to reach `precision` on them (not with `threshold`), reported with its 95% interval. A
            name with both a partner and an empty cell, or a name absent from the tables, is refused.
        precision: the precision the labels' threshold reaches.
        dedupe: match left against itself and add a cluster id (connected components of the pairs
            kept); needs threshold or labels.
        storage_root: where the dataset is written (local path or fsspec URL).
        partition_rows: rows per partition on each side: a worker holds one left partition and one
            right index shard at a time, whatever the tables' size.
        index_rows: right rows per index shard (default 1,000,000, and at least partition_rows),
            rounded up to whole partitions. Each left name searches every shard: its search time
            grows about linearly in the shards but only logarithmically in an HNSW shard's size.
            Fewer, larger shards search faster, but a worker holds a whole shard's index (its vectors
            and graph) while it indexes or searches it.
        index_kind: auto (exact inner product while the right side holds at most exact_limit names,
            HNSW above), exact or hnsw.
        exact_limit: the most right names auto indexes exactly (default 200,000: an exact query
            costs in proportion to the names; above, an HNSW index tuned to recall_target is faster).
        recall_sample: left names on which an approximate index's recall is measured against exact
            (and, with recall_target, efSearch tuned).
        ef_search: a fixed efSearch for an HNSW index, candidates visited per query, instead of
            tuning it to recall_target: higher finds more of the exact top k, slower.
        recall_target: how efSearch is chosen by default (0.98 unless ef_search is given; with
            recall_sample 0 and no ef_search, efSearch is 128): the smallest of 16, 32, ... 1024 whose recall@top_k
            against exact reaches this on every index shard, measured on recall_sample left names
            drawn at random (seeded) while each shard is indexed; where none does, 1024 is used with
            a warning and the recall reached goes into the report. Exact indexes ignore both.
        batch_size: names per forward pass (default: the engine's).
        max_row_bytes: the longest CSV row read (default 64 MiB): a CSV is read in blocks from 1 MiB,
            grown for a longer row up to this; a row over it fails the run naming the limit.
        dask_address: an existing Dask scheduler; none starts a local cluster.
        dask_workers: worker processes of the local cluster.
    """
    settings = {"left_column": left_column, "right_column": right_column, "model": model, "top_k": top_k,
                "threshold": threshold, "cosine_weight": cosine_weight, "labels": labels, "precision": precision, "dedupe": dedupe,
                "partition_rows": partition_rows, "index_rows": index_rows, "index_kind": index_kind,
                "exact_limit": exact_limit,
                "recall_sample": recall_sample, "batch_size": batch_size, "max_row_bytes": max_row_bytes,
                "ef_search": ef_search, "recall_target": recall_target}
    run = link_stages.with_options(task_runner=dask_task_runner(dask_address, dask_workers))
    return run(left, right, storage_root, settings)


if __name__ == "__main__":
    link()
