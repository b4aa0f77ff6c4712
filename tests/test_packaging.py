"""What `pip install .` puts into site-packages: the library and the command only, with their
licence metadata; the pipeline's generic top-level names (flows, tasks, runs, storage) stay in
the checkout, which scripts/setup.sh puts on the project venv's path."""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_the_library_and_the_command_only(tmp_path):
    # built from a copy: an in-tree build leaves build/ behind, whose stale files a later build ships
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "data", "run", ".prefect", "build", "site", "*.egg-info", "__pycache__", ".pytest_cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(src)], check=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("pearl_pipeline-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"pearl_model", "pearl_cli", "pearl_redact"}  # pearl_redact: the floor the library imports
    meta = Parser().parsestr(zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode())
    assert meta["License-Expression"] == "MIT"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300  # the readme it carries


def test_the_environment_passes_pip_check():
    """Set-up's environment holds every declared requirement of what it installs, the data-only
    packages' too (autofj's, from requirements-data.txt): set-up prints no warning a user can do
    nothing about."""
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_checkout_is_on_the_venv_path_for_the_pipeline():
    pth = Path(sysconfig.get_paths()["purelib"], "pearl-pipeline-checkout.pth")
    assert pth.read_text().strip() == str(ROOT)
    import storage

    assert Path(storage.__file__).resolve().parent == ROOT / "storage"
