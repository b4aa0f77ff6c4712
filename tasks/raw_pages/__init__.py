"""Stage 1: the input read into the `raw_pages` dataset, by one of two readers.

sequential.py reads any input (XML dumps, JSON lines, several of them) in order; multistream.py
reads a multistream dump with its index in parallel, by runs of bz2 streams. Both cut and parse
pages with the code of xml_dump.py, so both give the same rows. What other code uses of the
readers is re-exported here, so that `from tasks.raw_pages import ...` (as written before the
readers became this package) keeps working.
"""
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
    "check_source", "commit_multistream_task", "decompress_streams", "detect_format", "index_for", "plan_multistream",
    "plan_multistream_task", "plan_partitions", "plan_raw_pages", "plan_raw_pages_task", "raw_pages_task",
    "raw_partition_task", "read_index", "resolve_source", "sample_dump", "write_multistream", "write_raw_pages",
]
