"""benchmarks/ measures the project through its public names only (a benchmark that reaches
into a module's private names is a second copy of it that a refactor silently breaks); that
nothing of the project imports benchmarks/ is a floor rule of tests/test_import_rules.py."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("pearl_model", "tasks", "flows", "runs", "storage", "pearl_cli")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _root(node: ast.AST) -> str | None:
    """The name an expression starts from: `a` of `a.b._c`, `a(...).x`, `a[0].y`."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def private_uses(source: str, project: tuple[str, ...]) -> list[str]:
    """`x._name` where x is a project module, or anything imported from one or made by calling
    it (assignments followed); `getattr(x, "_name")`; `from project.module import _name`."""
    tree = ast.parse(source)
    found, bound = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in project}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in project:
            for a in node.names:
                if _private(a.name):
                    found.append(f"line {node.lineno}: from {node.module} import {a.name}")
                bound.add(a.asname or a.name)
    assigns = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.With, ast.For))]
    while True:  # names given a project object, until no new one
        before = len(bound)
        for n in assigns:
            if isinstance(n, ast.With):
                pairs = [(i.context_expr, i.optional_vars) for i in n.items if i.optional_vars is not None]
            elif isinstance(n, ast.For):
                pairs = [(n.iter, n.target)]
            else:
                pairs = [(n.value, t) for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
            for value, target in pairs:
                if value is not None and _root(value) in bound:
                    bound |= {t.id for t in ast.walk(target) if isinstance(t, ast.Name)}
        if len(bound) == before:
            break
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and _root(node.value) in bound:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)
              and _root(node.args[0]) in bound):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(set(found))


def benchmark_modules() -> tuple[str, ...]:
    """The project's packages and benchmarks/' own modules (they import each other by name)."""
    return PROJECT + tuple(p.stem for p in (ROOT / "benchmarks").glob("*.py"))


def test_no_benchmark_uses_a_private_name_of_the_project():
    project = benchmark_modules()
    bad = {str(p.relative_to(ROOT)): uses for p in sorted((ROOT / "benchmarks").glob("*.py"))
           if (uses := private_uses(p.read_text(encoding="utf-8"), project))}
    assert not bad, f"benchmarks using private names of the project: {bad}"


@pytest.mark.parametrize("source, reported", [
    ("from tasks import augmentations as a\na._tagger('x')\n", "a._tagger"),
    ("def f():\n    from tasks.negatives import _encoder\n", "from tasks.negatives import _encoder"),
    ("import tasks.negatives\ntasks.negatives._encoder('b', None)\n", "tasks.negatives._encoder"),
    ("from pearl_model.inference.encoder import load_encoder\nenc = load_encoder('m')\nenc._session.run()\n", "enc._session"),
    ("import storage.datasets as d\ngetattr(d, '_canonical')\n", "getattr(d, '_canonical')"),
    ("from phrase_mining import PeakPerProcess\nwith PeakPerProcess(0.1) as m:\n    m._stop.set()\n", "m._stop"),
])
def test_a_private_use_is_reported(source, reported):
    uses = private_uses(source, benchmark_modules())
    assert len(uses) == 1 and uses[0].endswith(reported)


@pytest.mark.parametrize("source", [
    "import threading\nclass P:\n    def __init__(self):\n        self._stop = threading.Event()\n",
    "from tasks import augmentations as a\na.load_models(None, {})\nprint(a.__name__)\n",
    "import json\njson._default_decoder\n",  # not the project's
])
def test_public_or_foreign_names_are_not_reported(source):
    assert private_uses(source, benchmark_modules()) == []
