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
from distributed import WorkerPlugin
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from storage.datasets import Dataset

# the files a reader may open without the verified reader: the roots of trust (manifests, pointers,
# writers' records, notes of damage), checked for form where they are read
TRUST_ROOTS = ("_manifest.json", "_latest.json")
TRUST_DIRS = ("/_written/", "/_damaged/")
READER = os.path.join("storage", "verified.py")
PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class AuditedFileSystem(MemoryFileSystem):
    """An in-memory store of its own (nothing of it is on the local disk) that records each read:
    (path, whether storage/verified.py is on the caller's stack, the nearest caller of the project)."""

    protocol = ("audited",)
    store: dict = {}
    pseudo_dirs = [""]
    reads: list[tuple[str, bool, str]] = []

    @staticmethod
    def _caller() -> tuple[bool, str]:
        frame, nearest = sys._getframe(2), ""
        while frame is not None:
            name = frame.f_code.co_filename
            if name.endswith(READER):
                return True, ""
            if not nearest and name.startswith(PROJECT) and "site-packages" not in name and name != __file__:
                nearest = f"{os.path.relpath(name, PROJECT)}:{frame.f_lineno}"
            frame = frame.f_back
        return False, nearest

    def _record(self, path) -> None:
        self.reads.append((self._strip_protocol(path), *self._caller()))

    def _open(self, path, mode="rb", **kwargs):
        if "r" in mode:
            self._record(path)
        return super()._open(path, mode, **kwargs)

    def cat_file(self, path, start=None, end=None, **kwargs):
        self._record(path)
        return super().cat_file(path, start, end, **kwargs)


fsspec.register_implementation("audited", AuditedFileSystem, clobber=True)


class AuditedDirFileSystem(DirFileSystem):
    """The audited store for Dask's worker processes, which cannot see another process's memory: a
    local directory (``base``, set in each process by :class:`Audit`) behind a protocol of its own,
    so that its paths (``auditeddir://pearl-...``) exist nowhere on the local disk as such and nothing
    opens them but through fsspec. Each process records its own reads, as AuditedFileSystem does."""

    protocol = ("auditeddir",)
    base: str = ""
    reads: list[tuple[str, bool, str]] = []

    def __init__(self, **storage_options):
        super().__init__(path=self.base, fs=LocalFileSystem(), **storage_options)

    def _record(self, path) -> None:
        self.reads.append((self._strip_protocol(path), *AuditedFileSystem._caller()))

    def open(self, path, mode="rb", *args, **kwargs):
        if "r" in mode:
            self._record(path)
        return super().open(path, mode, *args, **kwargs)

    def cat_file(self, path, *args, **kwargs):
        self._record(path)
        return super().cat_file(path, *args, **kwargs)

    def get_file(self, rpath, *args, **kwargs):
        self._record(rpath)
        return super().get_file(rpath, *args, **kwargs)


class Audit(WorkerPlugin):
    """Registers the audited directory store in a Dask worker process and counts the tasks it runs,
    so that the test can ask every process that ran one for its reads (:func:`report`)."""

    ran = 0

    def __init__(self, base: str):
        self.base = base

    def setup(self, worker) -> None:
        AuditedDirFileSystem.base = self.base
        AuditedDirFileSystem.reads.clear()
        fsspec.register_implementation("auditeddir", AuditedDirFileSystem, clobber=True)

    def transition(self, key, start, finish, **kwargs) -> None:
        if start == "executing":
            Audit.ran += 1


def report() -> dict:
    """A worker process's account: its id, the tasks it ran and every read it recorded."""
    return {"pid": os.getpid(), "ran": Audit.ran, "reads": list(AuditedDirFileSystem.reads)}


def walked_around(reads: list[tuple[str, bool, str]]) -> list[str]:
    """The reads of files the project wrote that did not go through storage.verified, each with
    the nearest caller of the project's code that made it."""
    return sorted({f"{path} ({caller})" for path, checked, caller in reads if not checked
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
    read_parts = {p for p, checked, _ in reads if checked}
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
    assert any(p.endswith(".faiss") for p, checked, _ in reads if checked)
    assert walked_around(reads) == []


def _body(fn, *args):
    """A Prefect task's body, run where Dask puts it, as a flow's task runner runs it (no run logger)."""
    from prefect.logging import disable_run_logger

    with disable_run_logger():
        return fn(*args)


def _raw_read(ds: Dataset, index: int) -> int:
    """A part read around the verified reader, in a worker: the workers' positive control."""
    return pq.read_table(f"{ds.path}/{ds.part_name(index)}", filesystem=ds.fs).num_rows


def test_every_read_in_dask_worker_processes_goes_through_the_verified_reader(dump, tmp_path, monkeypatch):
    """The first corpus stages with their mapped tasks on a local Dask cluster of two worker processes and
    the root on the audited directory store: every process that ran a task reported its reads, and
    none walked around the verified reader; a raw read in a worker is found (the control)."""
    from distributed import Client, LocalCluster, get_task_stream

    from flows.corpus_config import PagesConfig, ReadConfig
    from tasks.pages import pages_stage
    from tasks.raw_pages import raw_pages_stage
    from tests.test_incremental_corpus import InProcess

    class OnDask(InProcess):
        """The wiring's steps with `submit` and `map` on the workers (the flow's task runner), `call` here."""

        def __init__(self, client):
            self.client = client

        def submit(self, task, *args):
            return self.client.submit(_body, task.fn, *args, pure=False).result()

        def map(self, task, *args) -> list:
            n = next(len(list(a)) for a in args if not isinstance(a, unmapped))
            items = [a.value if isinstance(a, unmapped) else list(a) for a in args]
            return self.client.gather([self.client.submit(_body, task.fn, *(
                v if isinstance(a, unmapped) else v[i] for a, v in zip(args, items)), pure=False) for i in range(n)])

    from prefect import unmapped

    base = tmp_path / "audited"
    base.mkdir()
    Audit(str(base)).setup(None)  # this process too: the flow's own steps
    root = f"auditeddir://pearl-{uuid.uuid4().hex}"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        client.register_plugin(Audit(str(base)))
        steps = OnDask(client)
        with get_task_stream(client) as stream:  # the pages stage reads raw_pages parts by index, on the workers
            raw, _ = raw_pages_stage(dump, root, ReadConfig(pages_per_partition=3, multistream_index=None).params(),
                                     None, steps=steps)
            text, _ = pages_stage(raw, PagesConfig().params(2), steps=steps)
        workers = {t["worker"] for t in stream.data}
        reports = client.run(report)
        assert workers and workers <= set(reports)  # every process that ran a task answered
        assert all(reports[w]["ran"] and reports[w]["reads"] for w in workers)
        reads = [r for w in workers for r in reports[w]["reads"]] + AuditedDirFileSystem.reads
        assert any(checked and "/raw_pages/" in p for p, checked, _ in
                   (r for w in workers for r in reports[w]["reads"]))  # the workers read parts, checked
        assert not os.path.exists(root.split("://", 1)[1])
        found = walked_around(reads)
        assert found == [], "\n".join(found)

        assert client.submit(_raw_read, text.sentences, 0, pure=False).result() > 0
        caught = walked_around([r for rep in client.run(report).values() for r in rep["reads"]])
        assert caught and all("/sentences/" in p for p in caught), caught


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
    assert found and all("/raw_pages/" in p and ".parquet (" in p for p in found), found


@pytest.fixture
def exclusive_audited(audited, monkeypatch):
    """The audited root as an object store with a conditional write (a file set's commit needs one):
    its memory store's create-if-absent is atomic, as the memory protocol's is."""
    import storage.atomic

    monkeypatch.setattr(storage.atomic, "EXCLUSIVE_PROTOCOLS", storage.atomic.EXCLUSIVE_PROTOCOLS | {"audited"})
    return audited


def test_every_read_of_a_training_and_an_evaluation_goes_through_the_verified_reader(exclusive_audited, tmp_path,
                                                                                     monkeypatch):
    """A short training (character encoder, then the model, with a checkpoint) and an evaluation of the
    stored model on the audited root: the training set, the character encoder's files, the model's files
    and training log, and the scores are read through storage.verified, and nothing else is read there."""
    pytest.importorskip("torch")
    from pearl_model.training.config import TrainConfig
    from tasks.char_encoder import run_char_encoder
    from prefect.logging import disable_run_logger

    from tasks.evaluation import commit_results_task, evaluate_model_task, plan_results
    from tasks.training import (model_directory_task, plan_model, resolve_training_set, train_model, training_log,
                                word_vectors_of)
    from tests.conftest import tiny_benchmark
    from tests.test_train_flow import WORDS, tiny_corpus

    root, reads = exclusive_audited
    monkeypatch.setenv("PEARL_CACHE", str(tmp_path / "cache"))  # local copies and checkpoints of a remote root
    backbone = tiny_model_dir_for(tmp_path / "backbone", WORDS)
    tiny_corpus(root)
    ts = resolve_training_set(root)
    char = run_char_encoder(root, {"target": "word_vectors", "epochs": 1, "max_words": 0, "seed": 0},
                            word_vectors_of(ts))["fileset"]
    cfg = TrainConfig(char_proj_dim=4, batch_size=8, epochs=1, lr=1e-3, checkpoint_every=3, select_every=0,
                      device="cpu")
    out = plan_model(ts, char, backbone, cfg)
    train_model(ts, char, out, backbone, cfg, alias_holdout_pairs=0)
    assert training_log(out)["history"]
    bench = tmp_path / "bench"
    tiny_benchmark(bench, WORDS, turney=10, bird=12)
    model = model_directory_task.fn(out)  # the tasks' code, without a Prefect server
    results = plan_results(root, [model], str(bench), ["turney", "bird"], [0], draws=2)
    with disable_run_logger():
        for _ in range(2):  # the second time, the attempt's scores are read back (has_part, read_part)
            rows = evaluate_model_task.fn(model, results, 0, str(bench), ["turney", "bird"], [0], None, 2)
        commit_results_task.fn(results, {}, str(bench))
    assert rows == results.read().to_pylist()
    found = walked_around(reads)
    assert found == [], "\n".join(found)
    checked = {p for p, ok, _ in reads if ok}
    assert any("/training_set/" in p for p in checked) and any("/models/" in p for p in checked)
    assert any("/char_encoder/" in p for p in checked) and any("/eval_results/" in p for p in checked)
    assert not os.path.exists(root.split("://", 1)[1])
    assert walked_around(reads) == []


def tiny_model_dir_for(d, words):
    from tests.conftest import tiny_model_dir

    d.mkdir()
    return str(tiny_model_dir(d, words))


@pytest.mark.parametrize("where", ["local", "memory"])
def test_parts_read_by_index_parse_the_manifest_once_until_it_is_written_again(where, tmp_path, memory_root,
                                                                               monkeypatch):
    """A committed manifest never changes, so a reader of parts by index parses it once per process;
    one written again (here with a part's digest edited) has another stamp, is read again and refuses
    the part."""
    import json

    import pyarrow as pa

    from storage.datasets import Damaged, Versioned

    root = str(tmp_path / "store") if where == "local" else memory_root
    ds = Dataset(root, "numbers", "v1", pa.schema([("n", pa.int64())]))
    for i in range(3):
        ds.write_part(i, pa.table({"n": [i]}))
    ds.commit(code_version="t", params={}, inputs={})
    parsed, manifest = [], Versioned.manifest
    monkeypatch.setattr(Versioned, "manifest", lambda self: parsed.append(self.version) or manifest(self))
    assert [ds.read_part(i)["n"][0].as_py() for i in (0, 1, 2, 0)] == [0, 1, 2, 0]
    assert parsed == ["v1"]
    edited = manifest(ds)
    edited["parts"][1]["sha256"] = "0" * 64
    with ds.fs.open(f"{ds.path}/_manifest.json.new", "w") as fh:
        json.dump(edited, fh)
    ds.fs.mv(f"{ds.path}/_manifest.json.new", f"{ds.path}/_manifest.json")
    with pytest.raises(Damaged, match="part-00001.parquet"):
        ds.read_part(1)
    assert parsed == ["v1", "v1"]
