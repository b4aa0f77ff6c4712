"""The storage layer's promises on an S3-compatible server (moto's, tests/s3_stack.py), not on disk
(issue 67): a version invisible until committed, and what one process writes seen by another (a
rename on S3 is a copy and a delete; fsspec caches listings per process); a writer SIGKILLed mid-upload
leaves no committed version, nothing a later run reads, and its multipart upload swept; two processes
racing the registry's compare-and-swap give one winner a round; a store that ignores ``If-None-Match``
refused in one line; the verified reader fetches a part once."""
from __future__ import annotations

import math
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


def tiny_model(root: str, version: str, tmp_path) -> None:
    """A registered model ``version`` (one small file) on ``root``."""
    from storage.registry import ModelRegistry

    local = tmp_path / version
    local.mkdir()
    (local / "weights.bin").write_bytes(version.encode() * 8)
    ModelRegistry(root).model(version).upload(local, code_version="c", params={}, inputs={})
    ModelRegistry(root).register(version)


def test_two_processes_racing_the_registrys_compare_and_swap_give_one_winner_a_round(s3_root, tmp_path):
    from storage.registry import ModelRegistry

    models = ("ma", "mb", "mc")
    for v in models:
        tiny_model(s3_root, v, tmp_path)
    # Each round the two racers promote two models other than the current one, from the same pointer.
    # Each reads the pointer, then waits at its conditional write until both are there: the two
    # creates of the round's history file are sent together.
    code = f"""
        import sys
        import storage.registry as r
        real = r.write_exclusive
        def gated(fs, path, text):
            print("ready", flush=True)
            sys.stdin.readline()
            return real(fs, path, text)
        r.write_exclusive = gated
        registry = r.ModelRegistry({s3_root!r})
        for line in sys.stdin:
            _, expected, version = line.split()
            try:
                registry.promote(version, "race", expected_current=None if expected == "-" else expected)
                print("won", flush=True)
            except r.PromotionConflict:
                print("lost", flush=True)
    """
    racers = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=subprocess_env(),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        current, winners = None, []
        for _ in range(20):
            contenders = [v for v in models if v != current][:2]
            for p, v in zip(racers, contenders):
                p.stdin.write(f"go {current or '-'} {v}\n")
                p.stdin.flush()
            assert [p.stdout.readline().strip() for p in racers] == ["ready", "ready"]
            for p in racers:  # both hold the same pointer: now both create its successor
                p.stdin.write("\n")
                p.stdin.flush()
            results = [p.stdout.readline().strip() for p in racers]
            assert sorted(results) == ["lost", "won"], results
            current = contenders[results.index("won")]
            winners.append(current)
    finally:
        for p in racers:
            p.stdin.close()
            p.wait(timeout=60)
    pointer = ModelRegistry(s3_root).pointer()
    assert [h["version"] for h in pointer["history"]] == winners and pointer["version"] == winners[-1]


def test_a_store_that_ignores_if_none_match_is_refused_in_one_line(s3_server, s3_root, tmp_path, monkeypatch):
    import s3fs

    from storage.atomic import ExclusiveWriteUnsupported, check_exclusive
    from storage.registry import ModelRegistry, RegistryError
    from storage.stores import store
    from tests.s3_stack import IgnoringProxy

    tiny_model(s3_root, "ma", tmp_path)  # committed through the server's own conditional write (probed: honoured)
    fs, base = store(s3_root)
    check_exclusive(fs, f"{base}/x")
    proxy = IgnoringProxy(s3_server.endpoint)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        s3fs.S3FileSystem.clear_instance_cache()
        fs, base = store(s3_root)
        fs.pipe_file(f"{base}/twice", b"1", mode="create")
        fs.pipe_file(f"{base}/twice", b"2", mode="create")  # the condition is dropped on the way: both succeed
        with pytest.raises(ExclusiveWriteUnsupported):
            check_exclusive(fs, f"{base}/registry/history/00000001.json")
        with pytest.raises(RegistryError) as e:
            ModelRegistry(s3_root).promote("ma", "first")
        assert "\n" not in str(e.value) and "ignores conditional writes" in str(e.value), str(e.value)
        assert ModelRegistry(s3_root).pointer() is None  # nothing promoted
        assert not [p for p in fs.find(base) if ".tmp-" in p]  # the probe's scratch key removed
    finally:
        monkeypatch.undo()
        s3fs.S3FileSystem.clear_instance_cache()
        proxy.close()


def test_a_writer_killed_mid_upload_leaves_no_version_nothing_read_and_its_upload_swept(s3_root):
    from storage.atomic import clean_leftovers

    code = f"""
        import os, signal
        import pyarrow as pa
        import fsspec, s3fs
        fsspec.config.conf["s3"] = {{"default_block_size": 5 * 2**20}}  # the smallest part S3 takes (50 MiB by default)
        from storage.datasets import Dataset
        from storage.schemas import LINK_NAMES
        upload = s3fs.core.S3File._upload_chunk
        def killed_after_the_first_part(self, final=False):
            out = upload(self, final)
            if not final:  # one part of the multipart upload is on the server: killed here
                print("uploading", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        s3fs.core.S3File._upload_chunk = killed_after_the_first_part
        n = 8000  # 16 MB of random hex (8 MB in Parquet) over a 5 MiB block: uploaded in parts
        table = pa.table({{"row": pa.array(range(n), pa.int64()), "name": [os.urandom(1000).hex() for _ in range(n)]}})
        Dataset({s3_root!r}, "names", "v1", LINK_NAMES).write_part(0, table)
    """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=subprocess_env(),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert r.returncode == -9 and r.stdout.strip() == "uploading", r.stdout + r.stderr[-2000:]
    d = Dataset(s3_root, "names", "v1", LINK_NAMES)
    fs, bucket = d.fs, d.path.split("/", 1)[0]
    (upload,) = fs.list_multipart_uploads(bucket)  # abandoned: no object, but the store keeps its parts
    assert upload["Key"].startswith(d.staging.split("/", 1)[1] + "/.tmp-")
    assert not [p for p in fs.find(bucket) if ".tmp-" in p]
    assert not d.is_complete() and latest_version(s3_root, "names") is None
    assert d.written_parts() == [] and not d.has_part(0)
    # the sweep: kept while it could be a live writer's, aborted once its writer is known gone (or by
    # age, as a temporary file is: moto dates every upload 2010-11-10, so the age rule is not shown here)
    assert clean_leftovers(fs, d.staging, grace_s=math.inf) == [] and len(fs.list_multipart_uploads(bucket)) == 1
    assert clean_leftovers(fs, d.staging, grace_s=math.inf, dead_writers=True) == [f"{bucket}/{upload['Key']}"]
    assert fs.list_multipart_uploads(bucket) == []
    d.write_part(0, names(range(3)))  # the rerun
    d.commit(code_version="c", params={}, inputs={})
    assert d.read().num_rows == 3 and [p.file for p in d.parts()] == ["part-00000.parquet"]


def test_the_verified_reader_fetches_a_part_once_and_still_refuses_a_changed_one(s3_server, s3_root, monkeypatch):
    import s3fs

    import storage.verified
    from storage.datasets import Damaged

    d = Dataset(s3_root, "names", "v1", LINK_NAMES)
    d.write_part(0, pa.table({"row": pa.array(range(20000), pa.int64()), "name": [f"name {i}" for i in range(20000)]}))
    d.commit(code_version="c", params={}, inputs={})
    (part,) = d.parts()
    key = f"{d.path}/{part.file}"
    fetched = []  # bytes of the part this process fetched, read by read

    def counting_range(self, start, end):
        data = real_range(self, start, end)
        if self.path.endswith(key):
            fetched.append(len(data))
        return data

    def counting_cat(path, *a, **kw):
        data = real_cat(path, *a, **kw)
        if path.endswith(key):
            fetched.append(len(data))
        return data

    real_range, real_cat = s3fs.core.S3File._fetch_range, d.fs.cat_file  # d.fs: the process's one instance
    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", counting_range)
    monkeypatch.setattr(d.fs, "cat_file", counting_cat)
    monkeypatch.setattr(storage.verified, "_VERDICTS", type(storage.verified._VERDICTS)())  # this process read none
    gets = len([r for r in s3_server.requests() if r[0] == "GET" and r[1].split("?")[0].endswith(part.file)])
    assert d.read().num_rows == 20000
    assert sum(fetched) == part.bytes  # checked and parsed from one fetch
    assert len([r for r in s3_server.requests() if r[0] == "GET" and r[1].split("?")[0].endswith(part.file)]) \
        == gets + 1  # one request, as the server logged it
    fetched.clear()
    assert d.read(columns=["row"]).num_rows == 20000  # a whole read again: one fetch again, not ranged reads
    assert sum(fetched) == part.bytes
    fetched.clear()
    assert d.read_metadata(0, part).num_rows == 20000  # verified in this process: only the footer is fetched
    assert 0 < sum(fetched) < part.bytes
    before = len(s3_server.requests())
    Dataset(s3_root, "other", "v1", LINK_NAMES).write_part(0, names(range(5000)))
    objects_read = [r for r in s3_server.requests()[before:] if r[0] == "GET" and r[1].split("?")[0].count("/") > 1]
    assert objects_read == []  # its writer's record made from the bytes sent: the part is not fetched back
    d.fs.pipe_file(key, d.fs.cat_file(key)[:-9] + b"changed!!")  # another writer's bytes, same size
    with pytest.raises(Damaged, match="sha256"):
        d.read()


def test_only_a_store_keeps_checkpoints_and_scored_rows_in_the_local_cache(tmp_path, monkeypatch):
    """A root on this disk, as a path or a file:// URL, keeps them beside its datasets; an s3:// root in
    $PEARL_CACHE (a file:// root had been taken for a store by the "://" in its name)."""
    from storage.files import FileSet
    from tasks.evaluation import kept_rows_dir
    from tasks.training import checkpoint_dir

    monkeypatch.setenv("PEARL_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "store"
    for given in (str(root), root.as_uri()):
        assert kept_rows_dir(given) == str(root / "eval_rows")
        assert checkpoint_dir(FileSet(given, "models", "m1")) == root / "checkpoints" / "m1"
    assert kept_rows_dir("s3://bucket/pearl") == str(tmp_path / "cache" / "eval_rows")
    assert checkpoint_dir(FileSet("s3://bucket/pearl", "models", "m1")) == tmp_path / "cache" / "checkpoints" / "m1"


def test_pearl_encode_reads_a_stored_model_by_its_url_in_the_bucket(s3_root, tmp_path):
    """`pearl encode --model <root>/models/<version>` on a store: the model's checked local copy, the
    vectors of the same directory on disk; a URL in the store that names no stored model, one line."""
    pytest.importorskip("transformers")
    import numpy as np
    from typer.testing import CliRunner

    from pearl_cli.main import app
    from storage.files import FileSet
    from tests.conftest import tiny_model_dir

    (tmp_path / "model").mkdir()
    local = tiny_model_dir(tmp_path / "model", ["the", "new", "york", "times", "banana"])
    FileSet(s3_root, "models", "m1").upload(local, code_version="t", params={}, inputs={})
    runner = CliRunner()
    for model, out in ((f"{s3_root}/models/m1", tmp_path / "s3.npy"), (str(local), tmp_path / "disk.npy")):
        r = runner.invoke(app, ["encode", "new york", "banana", "--model", model, "--out", str(out)])
        assert r.exit_code == 0, r.output
    assert np.array_equal(np.load(tmp_path / "s3.npy"), np.load(tmp_path / "disk.npy"))
    refused = runner.invoke(app, ["encode", "banana", "--model", f"{s3_root}/exports/m1"])
    assert refused.exit_code == 2 and "names no stored model" in refused.output
