"""The Dockerfile's properties that matter and could regress (no container engine needed).

The image build itself was checked by hand (docs/running-at-scale.md, "Docker images per pool", says how); these tests
read the Dockerfile and .dockerignore, and run the few shell/Python pieces of it that decide
what gets installed.
"""

import json
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from docker.utils.build import exclude_paths  # docker's own .dockerignore matching (docker SDK, a Prefect dependency)

ROOT = Path(__file__).resolve().parents[1]
LOCK = (ROOT / "requirements.lock").read_text().splitlines()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def parse(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or (not buf and not line.strip()):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        keyword, _, args = (buf + line).strip().partition(" ")
        out.append((keyword.upper(), args.strip()))
        buf = ""
    return out


INSTRUCTIONS = parse((ROOT / "Dockerfile").read_text())


def stages() -> dict[str, list[tuple[str, str]]]:
    """Instructions per stage, keyed by the stage's name ('' for the last, unnamed one)."""
    out: dict[str, list] = {}
    current = None
    for keyword, args in INSTRUCTIONS:
        if keyword == "FROM":
            words = args.split()
            current = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            out[current] = [(keyword, args)]
        elif current is not None:
            out[current].append((keyword, args))
    return out


def image_steps(variant: str) -> list[tuple[str, str]]:
    """The instructions that make the image of one variant, base stage first."""
    s = stages()
    assert s[""][0] == ("FROM", "torch-${VARIANT}"), "the final stage builds on the VARIANT's torch stage"
    torch_stage = s[f"torch-{variant}"]
    assert torch_stage[0][1].split()[0] == "base"
    return s["base"] + torch_stage + s[""]


def runs(steps) -> list[str]:
    return [args for keyword, args in steps if keyword == "RUN"]


def env(steps) -> dict[str, str]:
    out = {}
    for keyword, args in steps:
        if keyword == "ENV":
            out.update(dict(w.split("=", 1) for w in shlex.split(args)))
    return out


def test_arg_variant_defaults_to_cpu():
    assert ("ARG", "VARIANT=cpu") in INSTRUCTIONS[: [k for k, _ in INSTRUCTIONS].index("FROM")]


def test_worker_runs_as_the_unprivileged_user_the_image_creates():
    for variant in ("cpu", "gpu"):
        steps = image_steps(variant)
        users = [args for keyword, args in steps if keyword == "USER"]
        assert users, "no USER: the worker would run as root"
        uid = users[-1].split(":")[0]
        assert uid not in ("root", "0")
        assert any("useradd" in r and f"--uid {uid}" in r for r in runs(steps))
        # what the flows write by default (storage_root=data under /app) belongs to that user
        assert any("chown pearl" in r and "data" in r for r in runs(steps))


def test_pip_check_fails_the_build_and_runs_before_the_data_only_packages():
    steps = runs(image_steps("cpu"))
    check = [i for i, r in enumerate(steps) if "pip check" in r]
    data = [i for i, r in enumerate(steps) if "requirements-data.txt" in r]
    assert check and data and check[-1] < data[0], "pip check must run before the data-only packages"
    assert "||" not in steps[check[-1]], "a conflict in the project's own dependencies fails the build"
    # Here too, pip check reports nothing but the data-only packages' undeclared dependencies:
    # so the image's check (without them) passes as long as this one does.
    data_only = {line.split("==")[0].strip().lower() for line in (ROOT / "requirements-data.txt").read_text().splitlines()
                 if line.strip() and not line.startswith("#")}
    report = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True).stdout
    problems = [line for line in report.splitlines() if line.split()[0].lower() not in data_only]
    assert problems in ([], ["No broken requirements found."]), problems


def test_torch_is_the_locked_cpu_build_installed_before_the_dependencies():
    pins = [line for line in LOCK if line.startswith("torch==")]
    assert pins == ["torch==2.13.0"]
    assert "torch==2.13.0" in PYPROJECT["project"]["dependencies"]
    cpu = stages()["torch-cpu"]
    assert ("ARG", "TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu") in cpu
    (install,) = runs(cpu)
    assert '--index-url "$TORCH_CPU_INDEX"' in install and "--no-deps" in install
    # the requirement it installs is the lock's pin, read from the lock by the Dockerfile's own command
    spec = install.split('"$(', 1)[1].split(')"', 1)[0]
    chosen = subprocess.run(["sh", "-c", spec], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert chosen.split() == pins
    # torch is in before anything could pull PyPI's (CUDA) torch as a dependency
    steps = runs(image_steps("cpu"))
    first_torch = next(i for i, r in enumerate(steps) if "requirements.lock" in r and "pip install" in r)
    assert steps[first_torch] == install


def test_dependencies_are_the_projects_own_as_locked_without_the_test_extra():
    steps = runs(INSTRUCTIONS)
    assert not any("-r requirements.lock" in r or "[test]" in r for r in steps), "the lock holds the test extra"
    (deps,) = [r for r in steps if "tomllib" in r]
    assert "pip install -c requirements.lock -r /tmp/requirements.txt" in deps
    words = shlex.split(deps)
    code = words[words.index("-c", words.index("python")) + 1]
    listed = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    assert listed == PYPROJECT["project"]["dependencies"]
    test_extra = {r.split("==")[0] for r in PYPROJECT["project"]["optional-dependencies"]["test"]}
    assert test_extra and not test_extra & {r.split("==")[0] for r in listed}


def test_dockerignore_keeps_out_local_state_but_not_what_the_dockerfile_copies(tmp_path):
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    sources = [w for keyword, args in INSTRUCTIONS if keyword == "COPY" for w in args.split()[:-1]]
    assert sources
    junk = [".venv/bin/python", "data/pages/part-0.parquet", "run/worker.pid", ".prefect/prefect.db",
            ".prefect/auth-string",  # the API's secret (scripts/env.sh) stays out of every image
            ".git/HEAD", "flows/__pycache__/x.pyc"]
    for rel in junk + [s.rstrip("/") + ("/m.py" if s.endswith("/") else "") for s in sources]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    context = exclude_paths(str(tmp_path), patterns)
    for rel in junk:
        assert rel not in context and str(Path(rel).parent) not in context, rel
    for s in sources:
        assert s.rstrip("/") in context, f"COPY {s} but .dockerignore excludes it"
        assert (ROOT / s).exists(), f"COPY {s}: not in the repository"


def test_the_image_copies_every_package_of_the_checkout():
    # the Dockerfile names them one by one: a new floor left out imports fine here and fails in the image
    copied = {w.rstrip("/") for keyword, args in INSTRUCTIONS if keyword == "COPY" for w in args.split()[:-1]}
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert {"flows", "tasks", "runs", "storage", "pearl_model", "pearl_cli"} <= packages
    assert packages <= copied, f"not copied into the image: {sorted(packages - copied)}"


@pytest.mark.parametrize("variant, deployment", [("cpu", "wiki"), ("gpu", "pearl-gpu")])
def test_each_variant_serves_its_pool(variant, deployment):
    deployments = {d["name"]: d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]}
    pool = deployments[deployment]["work_pool"]["name"]
    assert env(image_steps(variant))["PEARL_WORKER_POOL"] == pool
    (cmd,) = [args for keyword, args in image_steps(variant) if keyword == "CMD"]
    shell = json.loads(cmd)
    assert shell[:2] == ["sh", "-c"]
    assert shlex.split(shell[2]) == ["exec", "prefect", "worker", "start", "--pool", "$PEARL_WORKER_POOL",
                                     "--type", "process"]


def test_gpu_variant_installs_pypis_cuda_torch_at_the_locked_version():
    (install,) = runs(stages()["torch-gpu"])
    assert "index-url" not in install, "PyPI's Linux torch is the CUDA build"
    assert "pip install -c requirements.lock \"$(grep -E '^torch==' requirements.lock)\"" in install


def test_the_build_fails_unless_torch_is_the_variants_build():
    (check,) = [r for r in runs(image_steps("cpu")) if "torch.version.cuda" in r]
    words = shlex.split(check)
    at = next(i for i, w in enumerate(words) if "torch.version.cuda" in w)
    assert words[at - 2:at] == ["python", "-c"] and words[at + 1] == "$VARIANT"
    # this environment has the CPU build of torch (setup.sh installs the lock's torch==2.13.0)
    cpu = subprocess.run([sys.executable, "-c", words[at], "cpu"], capture_output=True, text=True)
    gpu = subprocess.run([sys.executable, "-c", words[at], "gpu"], capture_output=True, text=True)
    assert cpu.returncode == 0, cpu.stderr
    assert gpu.returncode != 0 and "is not the gpu build" in gpu.stderr
