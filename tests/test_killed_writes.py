"""A write killed midway (SIGKILL) leaves no temporary file for good (issue 54, item 7).

`pearl link --out` removes, before it writes, the temporary files its killed runs left in the output
directory (their writer process is gone); a dataset part is staged in the dataset's directory, which
every publish of the dataset sweeps, never inside the version, which the commit closes for good."""
from __future__ import annotations

import os
import signal
import string
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

ROOT = Path(__file__).resolve().parents[1]


def killed(code: str, watch: Path, timeout_s: float = 120) -> list[str]:
    """Run ``code`` in a new Python process, SIGKILL it once a ``.tmp-`` file appears under ``watch``
    (unless it killed itself), and return those files' names (relative to ``watch``)."""
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            if list(watch.rglob(".tmp-*")):
                time.sleep(0.2)  # some bytes written
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        output = proc.communicate(timeout=30)[0].decode()[-2000:]  # reaped, as a shell reaps what it ran
        assert proc.returncode == -signal.SIGKILL, output
        return [str(p.relative_to(watch)) for p in watch.rglob(".tmp-*")]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_killed_pearl_link_leaves_no_temporary_file_after_the_rerun(tmp_path):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from pearl_cli.main import app
    from tests.conftest import tiny_model_dir

    letters = list(string.ascii_lowercase)
    (tmp_path / "model").mkdir()
    model = tiny_model_dir(tmp_path / "model", letters + [f"##{c}" for c in letters])
    table = tmp_path / "names.csv"
    pacsv.write_csv(pa.table({"title": ["plum", "kiwi", "pear"]}), table)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = ["link", str(table), str(table), "--out", str(out_dir / "matches.csv"), "--model", str(model),
            "--backend", "torch"]
    # the write made slow: the CSV's first bytes, then a wait the kill ends
    code = ("import time, pyarrow.csv as c\n"
            "def slow(table, f, **kw):\n    f.write(b'\"left_row\",'); f.flush(); time.sleep(600)\n"
            "c.write_csv = slow\nfrom pearl_cli.main import app\n"
            f"app({args!r})\n")
    left = killed(code, out_dir)
    assert len(left) == 1 and left[0].endswith(".csv")  # the killed write's truncated file
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out_dir.iterdir()) == ["matches.csv"]
    assert pacsv.read_csv(out_dir / "matches.csv").num_rows == 3


def test_a_killed_pearl_encode_leaves_no_temporary_file_after_the_rerun(tmp_path):
    """`pearl encode --out` killed while it writes: the rerun removes what it left (issue 64, 11)."""
    pytest.importorskip("torch")
    import numpy as np
    from typer.testing import CliRunner

    from pearl_cli.main import app
    from tests.conftest import tiny_model_dir

    (tmp_path / "model").mkdir()
    model = tiny_model_dir(tmp_path / "model", ["plum", "kiwi", "pear"])
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = ["encode", "plum", "kiwi", "--out", str(out_dir / "v.npy"), "--model", str(model), "--backend", "torch"]
    code = ("import os, signal, pearl_cli.main as m\n"
            "def dying(stream, *a, **kw):\n    stream.write(b'\\x93NUMPY half'); stream.flush()\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            f"m._write = dying\nm.app({args!r})\n")
    killed(code, out_dir)
    assert len(list(out_dir.iterdir())) == 1  # the killed write's temporary file, whatever its name
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out_dir.iterdir()) == ["v.npy"]
    assert np.load(out_dir / "v.npy").shape[0] == 2


def test_a_live_writers_temporary_file_and_a_users_files_are_kept(tmp_path):
    from storage.atomic import atomic_path, clean_leftovers

    import fsspec

    fs = fsspec.filesystem("file")
    mine = [tmp_path / "report.tmp-1.csv", tmp_path / ".tmp-notes.csv"]  # a user's names, however old
    for p in mine:
        p.write_text("x")
        os.utime(p, (1_000_000_000, 1_000_000_000))
    with atomic_path(fs, str(tmp_path / "m.csv")) as tmp:  # this process's: alive
        Path(tmp).write_text("half")
        assert clean_leftovers(fs, str(tmp_path), dead_writers=True) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".tmp-notes.csv", "m.csv", "report.tmp-1.csv"])


def test_a_part_write_killed_midway_leaves_nothing_in_the_committed_version(tmp_path):
    from storage.datasets import Dataset
    from storage.schemas import LINK_NAMES

    root = str(tmp_path / "store")
    part = pa.table({"row": pa.array([0, 1], pa.int64()), "name": ["plum", "kiwi"]})
    code = ("import os, signal, storage.datasets as d\n"
            "def half(table, where, filesystem=None, **kw):\n"
            "    with filesystem.open(where, 'wb') as f: f.write(b'PAR1 half a part'); f.flush()\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "d.pq.write_table = half\nimport pyarrow as pa\nfrom storage.schemas import LINK_NAMES\n"
            f"d.Dataset({root!r}, 'names', 'v1', LINK_NAMES).write_part(0, pa.table({{'row': pa.array([0], pa.int64()), "
            "'name': ['plum']}))\n")
    assert killed(code, Path(root))
    d = Dataset(root, "names", "v1", LINK_NAMES)
    d.write_part(0, part)  # the rerun
    d.commit(code_version="c", params={}, inputs={})
    assert sorted(os.listdir(d.path)) == ["_manifest.json", "_written", "part-00000.parquet"]  # whole, alone
    assert os.listdir(f"{d.path}/_written") == ["part-00000.parquet.json"]  # its writer's record
    (leftover,) = [p for p in Path(root).rglob(".tmp-*")]
    assert leftover.parent == Path(d.path).parent  # where each publish of the dataset sweeps
    os.utime(leftover, (1_000_000_000, 1_000_000_000))  # six hours on
    d.reuse()  # the next run that publishes this dataset
    assert not list(Path(root).rglob(".tmp-*"))
    assert d.read().num_rows == 2
