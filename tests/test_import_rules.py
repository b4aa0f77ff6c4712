"""The floors' import rules (DESIGN.md), read from the source: flows over tasks over pearl_model
and storage, the CLI above them all; no stage imports another stage; the library imports
neither storage, tasks nor flows; storage imports nothing of the project."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# floor -> the project packages it must not import
FORBIDDEN = {"pearl_model": ("storage", "tasks", "flows", "pearl_cli"),
             "storage": ("pearl_model", "tasks", "flows", "pearl_cli"),
             "tasks": ("flows", "pearl_cli"), "flows": ("pearl_cli",)}
# modules of tasks/ that are helpers, not stages (no Prefect task, no dataset of their own)
HELPERS = {"figures": "matplotlib off-screen and PNGs inlined in markdown, for every stage's artifacts",
           "wikitext": "the pages stage's wikitext rendering (mwparserfromhell)",
           "corpus_config": "the stages' settings (pydantic), which build-corpus and retrain take as parameters",
           "steps": "how a stage's tasks run: the flow's Prefect task runs, or a benchmark's measured ones"}


def imports(path: Path, root: Path) -> set[str]:
    """Absolute module names imported anywhere in ``path`` (function-level imports included;
    relative ones resolved against the file's package; ``from pkg import m``, pkg a top-level
    package, gives pkg.m, since m may be a module)."""
    package = list(path.relative_to(root).with_suffix("").parts[:-1])
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out |= {f"{module}.{a.name}" for a in node.names} if "." not in module else {module}
    return out


def broken_rules(root: Path = ROOT) -> list[str]:
    bad = []
    for floor, forbidden in FORBIDDEN.items():
        for path in sorted((root / floor).rglob("*.py")):
            bad += [f"{path.relative_to(root)} imports {name}" for name in sorted(imports(path, root))
                    if name.split(".")[0] in forbidden]
    stages = ({p.stem for p in (root / "tasks").glob("*.py") if p.stem != "__init__"}
              | {p.name for p in (root / "tasks").iterdir() if (p / "__init__.py").is_file()}) - set(HELPERS)
    for path in sorted((root / "tasks").rglob("*.py")):
        mine = path.relative_to(root / "tasks").parts[0].removesuffix(".py")  # tasks/raw_pages/ is one stage
        bad += [f"{path.relative_to(root)} imports {name} (another stage)" for name in sorted(imports(path, root))
                if name.split(".")[0] == "tasks" and len(name.split(".")) > 1
                and name.split(".")[1] in stages - {mine}]
    return bad


def test_the_floors_import_only_downward():
    assert all((ROOT / floor).is_dir() for floor in FORBIDDEN)
    for helper in HELPERS:  # a helper that grew a Prefect task is a stage: the rule applies to it
        assert "@task" not in (ROOT / "tasks" / f"{helper}.py").read_text(), f"tasks/{helper}.py defines a task"
    bad = broken_rules()
    assert not bad, "imports against the floors' rules:\n" + "\n".join(bad)


@pytest.mark.parametrize("where, source, reported", [
    ("pearl_model/bad.py", "def f():\n    import storage.registry\n", "pearl_model/bad.py imports storage.registry"),
    ("pearl_model/sub/bad.py", "from ...tasks import training\n", "pearl_model/sub/bad.py imports tasks.training"),
    ("storage/bad.py", "from pearl_model.loading import x\n", "storage/bad.py imports pearl_model.loading"),
    ("tasks/b.py", "from tasks.a import helper\n", "tasks/b.py imports tasks.a (another stage)"),
    ("tasks/pkg/inner.py", "from tasks.a import helper\n", "tasks/pkg/inner.py imports tasks.a (another stage)"),
    ("flows/bad.py", "import pearl_cli.main\n", "flows/bad.py imports pearl_cli.main"),
])
def test_a_broken_rule_is_reported(tmp_path, where, source, reported):
    for floor in (*FORBIDDEN, "pearl_model/sub", "tasks/pkg"):
        (tmp_path / floor).mkdir(parents=True, exist_ok=True)
    (tmp_path / "tasks" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "tasks" / "a.py").write_text("helper = 1\n")
    (tmp_path / "tasks" / "c.py").write_text("from tasks import figures\nfrom tasks.figures import png_bytes\n")
    (tmp_path / "tasks" / "pkg" / "ok.py").write_text("from tasks.pkg import inner\nfrom .inner import x\n")
    (tmp_path / where).write_text(source)
    assert broken_rules(tmp_path) == [reported]


def test_the_library_front_door_names_its_public_api_without_loading_torch():
    import subprocess
    import sys

    code = ("import sys, pearl_model, pearl_model.phrases.labels; assert 'torch' not in sys.modules, 'torch loaded'; "
            "from pearl_model import load_encoder, PhraseEncoder, PearlModel, load_pearl, run_benchmark; "
            "import pearl_model.loading as L; assert load_encoder is L.load_encoder; "
            "print(sorted(pearl_model.__all__))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'run_benchmark'" in out.stdout
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        import pearl_model
        pearl_model.nope  # noqa: B018
