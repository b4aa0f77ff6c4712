"""The floors' import rules (docs/design.md), read from the source: flows over tasks over pearl_model,
runs and storage (runs over storage), the CLI above them all; every module of tasks/ belongs to a
stage, and no stage imports another; the library imports neither storage, runs, tasks nor flows;
storage imports nothing of the project; no floor imports benchmarks; no import cycle anywhere; each
room of pearl_model says what it holds."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# floor -> the project packages it must not import (benchmarks measure the floors, never the reverse)
FORBIDDEN = {"pearl_model": ("storage", "runs", "tasks", "flows", "pearl_cli", "benchmarks"),
             "storage": ("pearl_model", "runs", "tasks", "flows", "pearl_cli", "benchmarks"),
             "runs": ("pearl_model", "tasks", "flows", "pearl_cli", "benchmarks"),
             "tasks": ("flows", "pearl_cli", "benchmarks"), "flows": ("pearl_cli", "benchmarks"),
             "pearl_cli": ("benchmarks",)}
PACKAGES = ("pearl_model", "storage", "runs", "tasks", "flows", "pearl_cli")  # the module graph that has no cycle


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
    # every module of tasks/ is a stage, or part of its package's: what stages share lives a floor down
    stages = ({p.stem for p in (root / "tasks").glob("*.py") if p.stem != "__init__"}
              | {p.name for p in (root / "tasks").iterdir() if (p / "__init__.py").is_file()})
    for path in sorted((root / "tasks").rglob("*.py")):
        mine = path.relative_to(root / "tasks").parts[0].removesuffix(".py")  # tasks/raw_pages/ is one stage
        bad += [f"{path.relative_to(root)} imports {name} (another stage)" for name in sorted(imports(path, root))
                if name.split(".")[0] == "tasks" and len(name.split(".")) > 1
                and name.split(".")[1] in stages - {mine}]
    return bad


def test_the_floors_import_only_downward():
    assert all((ROOT / floor).is_dir() for floor in FORBIDDEN)
    bad = broken_rules()
    assert not bad, "imports against the floors' rules:\n" + "\n".join(bad)


@pytest.mark.parametrize("where, source, reported", [
    ("pearl_model/bad.py", "def f():\n    import storage.registry\n", "pearl_model/bad.py imports storage.registry"),
    ("pearl_model/sub/bad.py", "from ...tasks import training\n", "pearl_model/sub/bad.py imports tasks.training"),
    ("storage/bad.py", "from pearl_model.inference.loading import x\n", "storage/bad.py imports pearl_model.inference.loading"),
    ("tasks/b.py", "from tasks.a import helper\n", "tasks/b.py imports tasks.a (another stage)"),
    ("tasks/pkg/inner.py", "from tasks.a import helper\n", "tasks/pkg/inner.py imports tasks.a (another stage)"),
    ("tasks/b.py", "def f():\n    from tasks import a\n", "tasks/b.py imports tasks.a (another stage)"),
    ("tasks/pkg/inner.py", "from .. import a\n", "tasks/pkg/inner.py imports tasks.a (another stage)"),
    ("runs/bad.py", "from tasks.a import helper\n", "runs/bad.py imports tasks.a"),
    ("runs/bad.py", "def f():\n    import pearl_model.inference\n", "runs/bad.py imports pearl_model.inference"),
    ("runs/bad.py", "from flows import build_corpus\n", "runs/bad.py imports flows.build_corpus"),
    ("storage/bad.py", "from runs.artifacts import publish\n", "storage/bad.py imports runs.artifacts"),
    ("pearl_model/bad.py", "import runs.steps\n", "pearl_model/bad.py imports runs.steps"),
    ("flows/bad.py", "import pearl_cli.main\n", "flows/bad.py imports pearl_cli.main"),
    ("tasks/bad.py", "def f():\n    from benchmarks import stage_rates\n", "tasks/bad.py imports benchmarks.stage_rates"),
    ("pearl_cli/bad.py", "import benchmarks.common\n", "pearl_cli/bad.py imports benchmarks.common"),
])
def test_a_broken_rule_is_reported(tmp_path, where, source, reported):
    for floor in (*FORBIDDEN, "pearl_model/sub", "tasks/pkg"):
        (tmp_path / floor).mkdir(parents=True, exist_ok=True)
    (tmp_path / "tasks" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "tasks" / "a.py").write_text("helper = 1\n")  # no Prefect task, a stage all the same
    (tmp_path / "runs" / "ok.py").write_text("from storage.datasets import as_url\n")
    (tmp_path / "tasks" / "c.py").write_text("from runs import figures\nfrom runs.steps import Steps\nimport storage\n")
    (tmp_path / "tasks" / "pkg" / "ok.py").write_text("from tasks.pkg import inner\nfrom .inner import x\n")
    (tmp_path / where).write_text(source)
    assert broken_rules(tmp_path) == [reported]


def test_the_library_front_door_names_its_public_api_without_loading_torch():
    import subprocess
    import sys

    code = ("import sys, pearl_model, pearl_model.phrases.labels; assert 'torch' not in sys.modules, 'torch loaded'; "
            "from pearl_model import load_encoder, PhraseEncoder, PearlModel, load_pearl, run_benchmark; "
            "import pearl_model.inference.loading as L; assert load_encoder is L.load_encoder; "
            "print(sorted(pearl_model.__all__))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'run_benchmark'" in out.stdout
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        import pearl_model
        pearl_model.nope  # noqa: B018


def module_graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    """module -> the project modules it imports, at module level or inside a function (``from pkg
    import name``: pkg.name where that is a module, else pkg; a package is its ``__init__``)."""
    files = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for package in packages for p in sorted((root / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                candidates = [[a.name] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])
                                if node.level else [node.module])
                candidates = [[f"{base}.{a.name}", base] for a in node.names]
            else:
                continue
            for options in candidates:  # the most specific project module the import names
                for option in options:
                    parts = option.split(".")
                    found = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in files),
                                 None)
                    if found:
                        targets.add(found)
                        break
        graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through each strongly connected group of modules (Tarjan)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for group in groups:  # a shortest way back to the group's first module, by breadth-first search
        start = min(group)
        paths = {start: [start]}
        queue = [start]
        while queue:
            v = queue.pop(0)
            for w in sorted(graph[v] & group):
                if w == start:
                    out.append(paths[v] + [start])
                    queue = []
                    break
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    queue.append(w)
    return sorted(out)


def test_no_import_cycle_in_the_project():
    graph = module_graph()
    assert "pearl_model.inference.encoder" in graph["pearl_model.inference.model"]  # the graph is read at all
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_an_import_cycle_is_named(tmp_path):
    tree = {"pearl_model/__init__.py": "", "pearl_model/sub/__init__.py": "from .c import x\n",
            "pearl_model/sub/a.py": "def f():\n    from pearl_model.sub import b\n",  # function level, pkg -> module
            "pearl_model/sub/b.py": "from ..sub.c import y\n",
            "pearl_model/sub/c.py": "import pearl_model.sub.a\n",
            "pearl_model/sub/d.py": "from pearl_model.sub import a\nfrom . import x\n",  # into the cycle, not on it
            "tasks/__init__.py": "", "tasks/s.py": "from tasks import t\n", "tasks/t.py": "import tasks.s\n"}
    for where, source in tree.items():
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_text(source)
    graph = module_graph(tmp_path, ("pearl_model", "tasks"))
    assert graph["pearl_model.sub.d"] == {"pearl_model.sub.a", "pearl_model.sub"}
    assert cycles(graph) == [["pearl_model.sub.a", "pearl_model.sub.b", "pearl_model.sub.c", "pearl_model.sub.a"],
                             ["tasks.s", "tasks.t", "tasks.s"]]
    (tmp_path / "pearl_model/sub/c.py").write_text("y = 1\n")
    (tmp_path / "tasks/t.py").write_text("")
    assert cycles(module_graph(tmp_path, ("pearl_model", "tasks"))) == []


def rooms_without_docstring(root: Path = ROOT) -> list[str]:
    """pearl_model's subpackages whose ``__init__.py`` does not say what the room holds."""
    return sorted(str(p.parent.relative_to(root)) for p in (root / "pearl_model").rglob("__init__.py")
                  if p.parent != root / "pearl_model" and not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))))


def test_each_room_of_the_library_says_what_it_holds(tmp_path):
    rooms = [p.parent.name for p in (ROOT / "pearl_model").glob("*/__init__.py")]
    assert {"inference", "training", "pairs", "phrases", "evaluation"} <= set(rooms)
    assert not rooms_without_docstring(), rooms_without_docstring()
    (tmp_path / "pearl_model" / "quiet").mkdir(parents=True)
    (tmp_path / "pearl_model" / "__init__.py").write_text("")  # the front door is not a room
    (tmp_path / "pearl_model" / "quiet" / "__init__.py").write_text("# a comment is not a docstring\nx = 1\n")
    (tmp_path / "pearl_model" / "said").mkdir()
    (tmp_path / "pearl_model" / "said" / "__init__.py").write_text('"""What it holds."""\n')
    assert rooms_without_docstring(tmp_path) == ["pearl_model/quiet"]
