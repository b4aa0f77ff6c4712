"""The storage layer's promises on an S3-compatible server (moto's, tests/s3_stack.py), not on disk
(issue 67): a version invisible until committed, and what one process writes seen by another (a
rename on S3 is a copy and a delete; fsspec caches listings per process); a writer SIGKILLed mid-upload
leaves no committed version, nothing a later run reads, and its multipart upload swept; two processes
racing the registry's compare-and-swap give one winner a round; a store that ignores ``If-None-Match``
refused in one line; the verified reader fetches a part once."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from storage.datasets import Dataset, DatasetIncomplete, latest_version
from storage.schemas import LINK_NAMES
from tests.prefect_stack import ROOT
from tests.s3_stack import subprocess_env


def run_py(code: str, timeout: float = 120) -> str:
    """``code`` run by a new Python process (this one's environment: the S3 server's); its output."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=subprocess_env(),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return r.stdout.strip()


def names(rows: range) -> pa.Table:
    return pa.table({"row": pa.array(list(rows), pa.int64()), "name": [f"n{i}" for i in rows]})


def test_a_version_is_invisible_until_committed_and_each_process_sees_the_others_writes(s3_root):
    d = Dataset(s3_root, "names", "v1", LINK_NAMES)
    d.write_part(0, names(range(2)))
    assert d.written_parts() == [0]  # a listing of the version's records, which fsspec would keep
    assert not d.is_complete() and latest_version(s3_root, "names") is None
    with pytest.raises(DatasetIncomplete):
        d.read()
    # another process (a Dask worker) sees no version yet, and writes part 1
    seen = run_py(f"""
        import pyarrow as pa
        from storage.datasets import Dataset, latest_version
        from storage.schemas import LINK_NAMES
        d = Dataset({s3_root!r}, "names", "v1", LINK_NAMES)
        print(d.is_complete(), latest_version({s3_root!r}, "names"))
        d.write_part(1, pa.table({{"row": pa.array([2], pa.int64()), "name": ["n2"]}}))
    """)
    assert seen == "False None"
    d.commit(code_version="c", params={}, inputs={})  # this process lists the records again: both parts
    assert [p.file for p in d.parts()] == ["part-00000.parquet", "part-00001.parquet"]
    # and a third process reads the committed version whole
    assert run_py(f"""
        from storage.datasets import Dataset, latest_version
        from storage.schemas import LINK_NAMES
        v = latest_version({s3_root!r}, "names")
        print(v, Dataset({s3_root!r}, "names", v, LINK_NAMES).read().num_rows)
    """) == "v1 3"
