"""Stage 1: the input read into the `raw_pages` dataset, by one of two readers.

sequential.py reads any input (XML dumps, JSON lines, several of them) in order; multistream.py
reads a multistream dump with its index in parallel, by runs of bz2 streams. Both cut and parse
pages with the code of xml_dump.py, so both give the same rows. What other code uses of the
readers is re-exported here, so that `from tasks.raw_pages import ...` (as written before the
readers became this package) keeps working.
"""
from prefect import unmapped

from runs.steps import PREFECT, Steps
from tasks.raw_pages.multistream import (
    Stream, commit_multistream_task, decompress_streams, index_for, plan_multistream, plan_multistream_task,
    plan_partitions, raw_partition_task, read_index, write_multistream,
)
from tasks.raw_pages.sequential import (
    InputIncomplete, check_input_complete, check_input_complete_task, plan_raw_pages, plan_raw_pages_task,
    raw_pages_task, write_raw_pages,
)
from tasks.raw_pages.xml_dump import CODE_VERSION, SourceError, check_source, detect_format, resolve_source, sample_dump

__all__ = [
    "CODE_VERSION", "InputIncomplete", "SourceError", "Stream", "check_input_complete", "check_input_complete_task",
    "check_source", "commit_multistream_task", "raw_pages_stage", "decompress_streams", "detect_format", "index_for", "plan_multistream",
    "plan_multistream_task", "plan_partitions", "plan_raw_pages", "plan_raw_pages_task", "raw_pages_task",
    "raw_partition_task", "read_index", "resolve_source", "sample_dump", "write_multistream", "write_raw_pages",
]


def raw_pages_stage(source, storage_root: str, read_params: dict, multistream_index: str | None, *,
                    steps: Steps = PREFECT) -> tuple:
    """The stage in its flow: the input(s) -> raw_pages in one task, or, for a multistream dump
    with its index, one task per run of bz2 streams on the Dask workers and a commit of their
    summed counts. Returns the dataset and its manifest."""
    steps.stage("raw_pages")
    index = index_for(source, multistream_index)
    if index is None:
        raw = steps.call(plan_raw_pages_task, source, storage_root, read_params)
        return raw, steps.submit(raw_pages_task, source, raw, read_params)
    raw, dump, partitions = steps.call(plan_multistream_task, source, index, storage_root, read_params)
    if dump is None:  # that version is complete
        return raw, raw.reuse()
    part_stats = steps.map(raw_partition_task, unmapped(dump), partitions, unmapped(raw), unmapped(read_params))
    return raw, steps.call(commit_multistream_task, raw, dump, part_stats, read_params)
