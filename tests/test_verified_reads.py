"""The runtime check that no read walks around the verified reader (issue 64).

Python's audit hooks do not see pyarrow's, FAISS's or safetensors' own file reads, and a remote
store has no local ``open`` at all, so the check cannot rest on them. Instead the stages run with
the storage root on a test filesystem whose files exist nowhere on the local disk and which records
every read with its caller: a read of a file the project wrote that storage.verified did not open
is recorded outside it, and the test fails. It finds doors no list of names knows about; the AST
rule in test_import_rules.py is the fast first hint. The positive control puts one raw read back
(the pages stage reading its raw_pages part by index) and must be caught."""
from __future__ import annotations

import os
import sys
import uuid

import fsspec
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from storage.datasets import Dataset

# the files a reader may open without the verified reader: the roots of trust (manifests, pointers,
# writers' records, notes of damage), checked for form where they are read
TRUST_ROOTS = ("_manifest.json", "_latest.json")
TRUST_DIRS = ("/_written/", "/_damaged/")
READER = os.path.join("storage", "verified.py")


class AuditedFileSystem(MemoryFileSystem):
    """An in-memory store of its own (nothing of it is on the local disk) that records each read:
    (path, whether storage/verified.py is on the caller's stack)."""

    protocol = ("audited",)
    store: dict = {}
    pseudo_dirs = [""]
    reads: list[tuple[str, bool]] = []

    @staticmethod
    def _through_reader() -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename.endswith(READER):
                return True
            frame = frame.f_back
        return False

    def _open(self, path, mode="rb", **kwargs):
        if "r" in mode:
            self.reads.append((self._strip_protocol(path), self._through_reader()))
        return super()._open(path, mode, **kwargs)

    def cat_file(self, path, start=None, end=None, **kwargs):
        self.reads.append((self._strip_protocol(path), self._through_reader()))
        return super().cat_file(path, start, end, **kwargs)


fsspec.register_implementation("audited", AuditedFileSystem, clobber=True)


def walked_around(reads: list[tuple[str, bool]]) -> list[str]:
    """The reads of files the project wrote that did not go through storage.verified."""
    return sorted({path for path, checked in reads if not checked
                   and path.rsplit("/", 1)[-1] not in TRUST_ROOTS and not any(d in path for d in TRUST_DIRS)})


@pytest.fixture
def audited():
    AuditedFileSystem.reads.clear()
    root = f"audited://pearl-{uuid.uuid4().hex}"
    yield root, AuditedFileSystem.reads
    AuditedFileSystem.store.clear()
    AuditedFileSystem.pseudo_dirs[:] = [""]


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    from tests.test_incremental_corpus import DUMP_N, dump_name, write_dump

    return write_dump(tmp_path_factory.mktemp("dump") / dump_name("20260101"), DUMP_N)


def test_every_read_of_a_build_goes_through_the_verified_reader(audited, dump):
    """The corpus stages, as the flow wires them, on a root that is not on the local disk: every read
    of a part, store or array they wrote went through storage.verified (and they did read)."""
    from tests.test_incremental_corpus import build, build_below

    root, reads = audited
    built = build(dump, root)
    build_below(root, built)
    read_parts = {p for p, checked in reads if checked}
    assert any("/raw_pages/" in p for p in read_parts) and any("/sentences/" in p for p in read_parts)
    assert not os.path.exists(root.split("://", 1)[1])  # nothing of the root is on the local disk
    assert walked_around(reads) == []


def test_every_read_of_a_link_run_goes_through_the_verified_reader(audited, tmp_path):
    """The link stage's tasks: names, vectors, index shards, candidates."""
    import pyarrow as pa

    from tests.test_link_stage import LEFT, LETTERS, RIGHT, run
    from tests.conftest import tiny_model_dir

    root, reads = audited
    (tmp_path / "model").mkdir()
    model = str(tiny_model_dir(tmp_path / "model", LETTERS + [f"##{c}" for c in LETTERS]))
    pq.write_table(pa.table({"title": pa.array(RIGHT, pa.string())}), tmp_path / "right.parquet")
    pq.write_table(pa.table({"name": pa.array(LEFT, pa.string())}), tmp_path / "left.parquet")
    run(str(tmp_path / "left.parquet"), str(tmp_path / "right.parquet"), root, left_column="name", model=model,
        partition_rows=2, index_rows=5)
    assert any(p.endswith(".faiss") for p, checked in reads if checked)
    assert walked_around(reads) == []


def test_the_check_catches_a_raw_read_put_back(audited, dump, monkeypatch):
    """The positive control: the pages stage's read of a raw_pages part by index, put back as it was
    before the verified reader (a path handed to pyarrow), is found."""
    from flows.corpus_config import PagesConfig, ReadConfig
    from tests.test_incremental_corpus import STEPS
    from tasks.pages import pages_stage
    from tasks.raw_pages import raw_pages_stage

    root, reads = audited
    checked_read = Dataset.read_part

    def raw_read(self, index, columns=None, filter=None):
        if self.name != "raw_pages":
            return checked_read(self, index, columns, filter)
        return pq.read_table(f"{self.path}/{self.part_name(index)}", columns=columns, filters=filter,
                             filesystem=self.fs, schema=self.schema)

    monkeypatch.setattr(Dataset, "read_part", raw_read)
    raw, _ = raw_pages_stage(dump, root, ReadConfig(pages_per_partition=3, multistream_index=None).params(), None,
                             steps=STEPS)
    pages_stage(raw, PagesConfig().params(2), steps=STEPS)
    found = walked_around(reads)
    assert found and all("/raw_pages/" in p and p.endswith(".parquet") for p in found), found
