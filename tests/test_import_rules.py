"""The floors' import rules (docs/design.md), read from the source: flows over tasks over pearl_model,
runs and storage (runs over storage), the CLI above them all; every module of tasks/ belongs to a
stage, and no stage imports another; the library imports neither storage, runs, tasks nor flows;
storage imports nothing of the project but pearl_redact; no floor imports benchmarks; no import cycle
anywhere; each room of pearl_model says what it holds. pearl_redact, which both the library and
storage import, imports nothing of the project."""
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
             "pearl_cli": ("benchmarks",),
             # the floor below the library and storage (pearl_redact): it imports nothing of the project
             "pearl_redact": ("pearl_model", "storage", "runs", "tasks", "flows", "pearl_cli", "benchmarks")}
PACKAGES = ("pearl_model", "storage", "runs", "tasks", "flows", "pearl_cli", "pearl_redact")  # the module graph that has no cycle


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


# --- one door for a manifest's part names --------------------------------------------------------
PART_DOORS = {"storage/datasets.py": {"Dataset.parts"}, "storage/files.py": {"FileSet.entries"}}
PART_FLOORS = ("tasks", "flows", "storage")
_FILE_LISTS = ("parts", "files")  # a dataset manifest's parts, a file set manifest's files
# what they return is no part name: checked paths, or a count
_CHECKED = {"file_path", "stored_path", "parts", "entries", "part_files", "part_path", "len"}
_PATH_TYPES = {"Path", "PurePath", "PurePosixPath", "PosixPath"}


def _is_manifest(node: ast.AST, bound: set[str]) -> bool:
    """``x.manifest()``, or a name bound to one in this function, or a name that says it is one
    (``manifest``, ``man``, ``raw_manifest``: what a stage is handed)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "manifest":
        return True
    return isinstance(node, ast.Name) and (node.id in bound or node.id == "man" or node.id.endswith("manifest"))


def _file_list(node: ast.AST, bound: set[str]) -> bool:
    """``M["parts"]``, ``M["files"]``, ``M.get("parts")``... with M a manifest."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value in _FILE_LISTS and _is_manifest(node.value, bound)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and node.args and isinstance(node.args[0], ast.Constant)):
        return node.args[0].value in _FILE_LISTS and _is_manifest(node.func.value, bound)
    return False


def _tainted(node: ast.AST, bound: set[str], tainted: set[str]) -> bool:
    """Whether ``node`` holds data from a manifest's file list (a door's checked result does not)."""
    if _file_list(node, bound):
        return True
    if isinstance(node, ast.Name):
        return node.id in tainted
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _CHECKED or isinstance(func, ast.Name) and func.id in _CHECKED:
            return False
    return any(_tainted(child, bound, tainted) for child in ast.iter_child_nodes(node))


def _targets(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _builds_path(node: ast.AST, bound: set[str], tainted: set[str]) -> bool:
    """A path put together by hand from manifest data: an f-string, ``+`` or ``/`` (a Path), a
    ``join`` (os.path, posixpath, ``"/".join``) or ``joinpath``, or ``Path(...)`` with such an operand."""
    if isinstance(node, ast.JoinedStr):
        operands = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
        operands = [node.left, node.right]
    elif isinstance(node, ast.Call) and (
            isinstance(node.func, ast.Attribute) and node.func.attr in ("join", "joinpath")
            or isinstance(node.func, ast.Name) and node.func.id in _PATH_TYPES):
        joinpath = isinstance(node.func, ast.Attribute) and node.func.attr == "joinpath"
        operands = [*node.args, *([node.func.value] if joinpath else [])]  # p.joinpath(x): p is an operand too
    else:
        return False
    return any(_tainted(o, bound, tainted) for o in operands)


def _scopes(tree: ast.Module):
    """(qualified name, node) of the module and of every function in it (methods as Class.method)."""
    yield "", tree
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{prefix}{child.name}", child
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)
    yield from walk(tree, "")


def _own_nodes(scope: ast.AST):
    """The nodes of one scope, not those of the functions inside it (they are scopes of their own)."""
    for child in ast.iter_child_nodes(scope):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield child
            yield from _own_nodes(child)


def second_part_doors(root: Path = ROOT) -> list[str]:
    """Places under tasks/, flows/ or storage/ that turn a manifest's part names into paths another
    way than its one door (``Dataset.parts`` / ``Versioned.file_path`` for datasets, ``FileSet.entries``
    / ``FileSet.stored_path`` for file sets), which refuses a name outside the version directory.

    Caught, in any function but the doors: (1) reading a manifest's file list, ``M["parts"]``,
    ``M["files"]``, ``M.get(...)`` of either, where M is ``x.manifest()``, a name bound to one in
    the same function, or a name ``man`` / ``*manifest`` (counting the parts reads it too: use
    ``len(ds.parts())``); (2) a path put together from such data by an f-string, ``+``, ``/``,
    ``os.path.join`` / ``posixpath.join`` / ``"/".join``, ``joinpath`` or ``Path(...)``, the data
    followed through assignments, ``for`` targets and comprehensions within the function. Not
    caught: other dicts' ``"parts"`` keys (``stats["parts"]``, a count), data passed on to another
    function (that function's own reads are checked), and paths from the doors' results."""
    bad = []
    for floor in PART_FLOORS:
        for path in sorted((root / floor).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            doors = PART_DOORS.get(rel, set())
            for name, scope in _scopes(ast.parse(path.read_text(encoding="utf-8"))):
                if name in doors:
                    continue
                nodes = list(_own_nodes(scope))
                bound = {t for n in nodes if isinstance(n, ast.Assign) and _is_manifest(n.value, set())
                         for target in n.targets for t in _targets(target)}
                tainted: set[str] = set()
                for _ in range(3):  # names bound from names bound from the file list, a few steps deep
                    for n in nodes:
                        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n.value is not None \
                                and _tainted(n.value, bound, tainted):
                            tainted |= _targets(n.targets[0] if isinstance(n, ast.Assign) else n.target)
                        elif isinstance(n, (ast.For, ast.comprehension)) and _tainted(n.iter, bound, tainted):
                            tainted |= _targets(n.target)
                where = f"{rel}:{{}} ({name or 'module'})"
                bad += [where.format(n.lineno) + " reads a manifest's file list" for n in nodes if _file_list(n, bound)]
                bad += [where.format(n.lineno) + " builds a path from a manifest's part names" for n in nodes
                        if _builds_path(n, bound, tainted)]
    return sorted(set(bad), key=lambda s: (s.split(":")[0], int(s.split(":")[1].split(" ")[0]), s))


def test_manifest_part_names_become_paths_only_through_the_door():
    bad = second_part_doors()
    assert not bad, "a manifest's part names read outside Dataset.parts / FileSet.entries:\n" + "\n".join(bad)


@pytest.mark.parametrize("source, reported", [
    ("def plan(ds):\n    for part in ds.manifest()['parts']:\n        yield f\"{ds.path}/{part['file']}\"\n",
     ["tasks/s.py:2 (plan) reads a manifest's file list", "tasks/s.py:3 (plan) builds a path from a manifest's part names"]),
    ("import os\ndef f(ds):\n    man = ds.manifest()\n    names = [p['file'] for p in man.get('parts')]\n"
     "    return [os.path.join(ds.path, n) for n in names]\n",
     ["tasks/s.py:4 (f) reads a manifest's file list", "tasks/s.py:5 (f) builds a path from a manifest's part names"]),
    ("import posixpath\ndef f(raw_manifest, base):\n    return posixpath.join(base, raw_manifest['files'][0]['file'])\n",
     ["tasks/s.py:3 (f) builds a path from a manifest's part names", "tasks/s.py:3 (f) reads a manifest's file list"]),
    ("from pathlib import Path\nclass A:\n    def f(self, m):\n        files = self.manifest()['files']\n"
     "        return [Path(self.path) / e['file'] for e in files]\n",
     ["tasks/s.py:4 (A.f) reads a manifest's file list", "tasks/s.py:5 (A.f) builds a path from a manifest's part names"]),
    ("def n(raw):\n    return len(raw.manifest()['parts'])\n", ["tasks/s.py:2 (n) reads a manifest's file list"]),
    # not flagged: a stats count named "parts", the door's checked paths, a path from other data
    ("def f(ds, manifest, stats):\n    k = manifest['stats']['right']['parts'] + stats['parts']\n"
     "    paths = [f'{p.path}!' for p in ds.parts()] + [ds.file_path(n) + '.x' for n in stats['files']]\n"
     "    return k, paths, f\"{ds.path}/part-{k:05d}.parquet\"\n", []),
])
def test_a_second_part_door_is_reported(tmp_path, source, reported):
    for floor in PART_FLOORS:
        (tmp_path / floor).mkdir()
    (tmp_path / "storage" / "datasets.py").write_text(
        "class Dataset:\n    def parts(self):\n        return [self.file_path(p['file']) for p in self.manifest()['parts']]\n")
    (tmp_path / "tasks" / "s.py").write_text(source)
    assert second_part_doors(tmp_path) == reported


# --- one reader for what the project wrote (a fast hint: the runtime check in test_verified_reads is the judge) ----
READ_FLOORS = ("tasks", "flows", "pearl_cli", "runs", "storage")
# the verified reader, and the functions that hand its checked path or bytes to a parser
READ_DOORS = {"storage/verified.py": None,
              "storage/datasets.py": {"Dataset.read_array", "Dataset.read_metadata", "Dataset.read_bucket",
                                      "Dataset._read", "Dataset.iter_batches"}}
_PARSERS = {("pq", "read_table"), ("pq", "ParquetFile"), ("pq", "read_metadata"), ("pq", "read_schema"),
            ("pads", "dataset"), ("faiss", "read_index"), ("np", "load"), ("numpy", "load"), ("torch", "load")}
_OPENERS = {"load_file", "safe_open"}
_IN_MEMORY = {"BytesIO", "BufferReader", "frombuffer"}  # checked bytes handed over: not an open


def stored_file_opens(root: Path = ROOT) -> list[str]:
    """Calls under tasks/, flows/, pearl_cli/, runs/ and storage/ that open a file by its path for a
    parser (Parquet, pyarrow datasets, FAISS, NumPy, torch, safetensors) outside the verified reader's
    functions: every read of what the project wrote goes through `storage.verified`. A parser handed
    bytes in memory (``np.load(io.BytesIO(data))``) opens nothing."""
    bad = []
    for floor in READ_FLOORS:
        for path in sorted((root / floor).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            doors = READ_DOORS.get(rel, set())
            if doors is None:
                continue
            for name, scope in _scopes(ast.parse(path.read_text(encoding="utf-8"))):
                if name in doors:
                    continue
                for n in _own_nodes(scope):
                    if not isinstance(n, ast.Call):
                        continue
                    f = n.func
                    called = (f.value.id, f.attr) if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                        else None
                    opener = isinstance(f, ast.Name) and f.id in _OPENERS or \
                        isinstance(f, ast.Attribute) and f.attr in _OPENERS
                    if called not in _PARSERS and not opener:
                        continue
                    first = n.args[0] if n.args else None
                    if isinstance(first, ast.Call) and (getattr(first.func, "attr", None) in _IN_MEMORY
                                                        or getattr(first.func, "id", None) in _IN_MEMORY):
                        continue
                    bad.append(f"{rel}:{n.lineno} ({name or 'module'}) opens a file for {ast.unparse(f)}")
    return bad


def test_stored_files_are_opened_only_by_the_verified_reader():
    bad = stored_file_opens()
    assert not bad, "a stored file opened outside storage.verified:\n" + "\n".join(bad)


@pytest.mark.parametrize("source, reported", [
    ("import pyarrow.parquet as pq\ndef f(ds, i):\n    return pq.read_table(f'{ds.path}/part-{i:05d}.parquet')\n",
     ["tasks/s.py:3 (f) opens a file for pq.read_table"]),
    ("import faiss\nclass A:\n    def g(self, p):\n        return faiss.read_index(p)\n",
     ["tasks/s.py:4 (A.g) opens a file for faiss.read_index"]),
    ("from safetensors.torch import load_file\ndef h(p):\n    return load_file(p)\n",
     ["tasks/s.py:3 (h) opens a file for load_file"]),
    # not flagged: bytes in memory, the verified reader's own functions
    ("import io\nimport numpy as np\ndef f(data):\n    return np.load(io.BytesIO(data))\n", []),
])
def test_a_stored_file_opened_outside_the_reader_is_reported(tmp_path, source, reported):
    for floor in READ_FLOORS:
        (tmp_path / floor).mkdir()
    (tmp_path / "storage" / "verified.py").write_text("import numpy as np\ndef v(p):\n    return np.load(p)\n")
    (tmp_path / "tasks" / "s.py").write_text(source)
    assert stored_file_opens(tmp_path) == reported
