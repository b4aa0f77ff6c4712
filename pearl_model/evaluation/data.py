"""Loaders for the PEARL phrase benchmark files, exactly in the format the authors publish.

Every loader takes the benchmark directory (the authors' `eval_data/` folder: see
`../shared/benchmarks/pearl/README.md`) and raises `DatasetMissing`, naming the path it
looked for, when a file is not there, so that a runner can skip that dataset and go on.

    ppdb/ppdb.json            [[p1, p2, "pos"|"neg", score|null], ...]       23,364 pairs
    ppdb/ppdb_filtered.json   [[p1, p2, "pos"|"neg"], ...]                   15,532 pairs
    turney/turney.txt         bigram | correct | w1 | w2 | d1 | d2 | d3 | d4
    bird/bird.txt             TSV with header: term1, term2, relatedness score, ...
    yago|umls/*_test_samples.txt   mention \\t canonical name                10,000 lines
    conll2003|bc5cdr/test.json     JSON lines {"sentences": [[tok]], "ner": [[[start, end, TYPE]]]}
    autofj/autofj.md          Markdown table of the 50 AutoFJ datasets; the tables themselves
                              are the `autofj` package's autofj/benchmark/<Dataset>/{left,right,gt}.csv
"""
from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..packages import installed_dir

AUTOFJ_PIP = "pip install --no-deps autofj==0.0.6"
AUTHORS_DATA = "the PEARL authors' repository (github.com/tigerchen52/PEARL), folder eval_data/"
RETRIEVAL_FILES = {"yago": "yago/yago_test_samples.txt", "umls": "umls/umls_test_samples.txt"}
PPDB_FILES = {False: "ppdb/ppdb.json", True: "ppdb/ppdb_filtered.json"}  # by `filtered`
TURNEY_FILE, BIRD_FILE, AUTOFJ_LIST = "turney/turney.txt", "bird/bird.txt", "autofj/autofj.md"
# The types the paper clusters: CoNLL-2003 without MISC, BC5CDR's two.
ENTITY_TYPES = {"conll2003": ("PER", "LOC", "ORG"), "bc5cdr": ("Chemical", "Disease")}


class DatasetMissing(FileNotFoundError):
    """A benchmark file (or the autofj package) is not where it should be; the message says where."""


def entities_file(name: str, split: str) -> str:
    return f"{name}/{split}.json"


# Every file read from the benchmark directory, with what reads it (`pearl benchmarks check` lists them).
BENCHMARK_FILES = {
    PPDB_FILES[False]: "PPDB",
    PPDB_FILES[True]: "PPDB-filtered",
    TURNEY_FILE: "Turney",
    BIRD_FILE: "BIRD",
    RETRIEVAL_FILES["yago"]: "YAGO-10k",
    RETRIEVAL_FILES["umls"]: "UMLS-10k",
    entities_file("conll2003", "test"): "CoNLL-2003",
    entities_file("bc5cdr", "test"): "BC5CDR",
    entities_file("conll2003", "dev"): "CoNLL-2003's dev split (the training's checkpoint checks)",
    entities_file("bc5cdr", "dev"): "BC5CDR's dev split (the training's checkpoint checks)",
    AUTOFJ_LIST: "AutoFJ's list of its 50 tables (the tables come from the autofj package)",
}


def benchmark_dir_lookup() -> tuple[Path, str]:
    """(the benchmark directory, where that choice comes from): $PEARL_BENCHMARKS, else the first
    `../shared/benchmarks/pearl` beside the repository or the current directory that exists, else
    the one beside the repository (where the files would go)."""
    if os.environ.get("PEARL_BENCHMARKS"):
        return Path(os.environ["PEARL_BENCHMARKS"]), "$PEARL_BENCHMARKS"
    bases = {"the repository": Path(__file__).resolve().parents[2], "the current directory": Path.cwd()}
    candidates = {f"../shared/benchmarks/pearl beside {where}": base.parent / "shared" / "benchmarks" / "pearl"
                  for where, base in bases.items()}
    found = next((item for item in candidates.items() if item[1].is_dir()), next(iter(candidates.items())))
    return found[1], found[0]


def default_benchmark_dir() -> Path | None:
    """$PEARL_BENCHMARKS, else `../shared/benchmarks/pearl` beside the repository (or the
    current directory) when it exists, else None."""
    path, source = benchmark_dir_lookup()
    return path if source == "$PEARL_BENCHMARKS" or path.is_dir() else None


def missing_files(benchmark_dir) -> dict[str, str]:
    """The files of BENCHMARK_FILES not under ``benchmark_dir``: {the path each goes to: what reads it}."""
    root = Path(benchmark_dir)
    return {str(root / rel): what for rel, what in BENCHMARK_FILES.items() if not (root / rel).is_file()}


def files_fingerprint(directory) -> str:
    """Identity of a directory's files for versioning and cached scores: names, sizes, mtimes."""
    import hashlib

    h = hashlib.sha256()
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"directory not found: {directory}")
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            h.update(f"{p.relative_to(root)}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:16]


def _file(benchmark_dir, relative: str) -> Path:
    if benchmark_dir is None:
        raise DatasetMissing(f"no benchmark directory given (and $PEARL_BENCHMARKS is not set): "
                             f"cannot read {relative}")
    path = Path(benchmark_dir) / relative
    if not path.is_file():
        raise DatasetMissing(f"benchmark file not found: {path}")
    return path


# --- paraphrase classification ------------------------------------------------------------

def load_ppdb(benchmark_dir, filtered: bool = False) -> tuple[list[str], list[str], list[int]]:
    """(phrases1, phrases2, labels 1=pos/0=neg) of ppdb.json or ppdb_filtered.json."""
    path = _file(benchmark_dir, PPDB_FILES[filtered])
    rows = json.loads(path.read_text(encoding="utf-8"))
    p1, p2, labels = [], [], []
    for i, row in enumerate(rows):
        if len(row) < 3 or row[2] not in ("pos", "neg"):
            raise ValueError(f"{path}: pair {i} is not [phrase1, phrase2, 'pos'|'neg', ...]: {row!r}")
        p1.append(row[0])
        p2.append(row[1])
        labels.append(1 if row[2] == "pos" else 0)
    return p1, p2, labels


# --- phrase similarity --------------------------------------------------------------------

def load_turney(benchmark_dir) -> list[tuple[str, list[str]]]:
    """(bigram, [correct unigram, 4 distractors]): the correct answer is candidate 0. The
    bigram's own two words (columns 3-4) are not candidates, as in the paper."""
    path = _file(benchmark_dir, TURNEY_FILE)
    items = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(" | ")]
        if len(cols) != 8:
            raise ValueError(f"{path}:{n}: expected 8 ' | '-separated columns, got {len(cols)}")
        items.append((cols[0], [cols[1]] + cols[4:]))
    return items


def load_bird(benchmark_dir) -> tuple[list[str], list[str], list[float]]:
    """(term1s, term2s, human relatedness scores in [0, 1])."""
    path = _file(benchmark_dir, BIRD_FILE)
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        missing = {"term1", "term2", "relatedness score"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: header lacks {sorted(missing)}")
        rows = [r for r in reader if r["term1"] is not None]
    return ([r["term1"] for r in rows], [r["term2"] for r in rows],
            [float(r["relatedness score"]) for r in rows])


# --- entity retrieval ---------------------------------------------------------------------

def load_retrieval(benchmark_dir, name: str) -> tuple[list[str], list[str]]:
    """(mentions, gold canonical names) of yago or umls test samples."""
    if name not in RETRIEVAL_FILES:
        raise ValueError(f"unknown retrieval dataset {name!r}; known: {sorted(RETRIEVAL_FILES)}")
    path = _file(benchmark_dir, RETRIEVAL_FILES[name])
    mentions, gold = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            raise ValueError(f"{path}:{n}: expected 'mention<TAB>canonical name'")
        mentions.append(cols[0].strip())
        gold.append(cols[1].strip())
    return mentions, gold


# --- entity clustering --------------------------------------------------------------------

def load_entities(benchmark_dir, name: str, split: str = "test") -> tuple[list[str], list[str]]:
    """(entity span texts, types): every span occurrence of the kept types (duplicates
    included, as the authors cluster occurrences); tokens joined by one space, `end` inclusive."""
    if name not in ENTITY_TYPES:
        raise ValueError(f"unknown clustering dataset {name!r}; known: {sorted(ENTITY_TYPES)}")
    path = _file(benchmark_dir, entities_file(name, split))
    keep = set(ENTITY_TYPES[name])
    names, types = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        for tokens, spans in zip(obj["sentences"], obj["ner"]):
            for start, end, etype in spans:
                if etype not in keep:
                    continue
                if not 0 <= start <= end < len(tokens):
                    raise ValueError(f"{path}:{n}: span [{start}, {end}] outside a {len(tokens)}-token sentence")
                names.append(" ".join(tokens[start:end + 1]))
                types.append(etype)
    return names, types


# --- fuzzy join ---------------------------------------------------------------------------

@dataclass
class JoinTable:
    name: str
    left: list[str]          # left.csv titles, file order (candidates)
    right: list[str]         # right.csv titles, file order (queries)
    gold: dict[str, str]     # right title -> its left title, from gt.csv


def autofj_package_dir() -> Path:
    """autofj/benchmark inside the installed package, found without importing it."""
    path = installed_dir("autofj", DatasetMissing,
                       f"the AutoFJ tables come from the autofj package, which is not installed: {AUTOFJ_PIP}") / "benchmark"
    if not path.is_dir():
        raise DatasetMissing(f"{path} not found: reinstall the autofj package ({AUTOFJ_PIP})")
    return path


def autofj_dataset_names(benchmark_dir=None) -> list[str]:
    """The datasets listed in autofj/autofj.md (the first column), else every table folder
    of the package."""
    md = Path(benchmark_dir) / AUTOFJ_LIST if benchmark_dir is not None else None
    if md is not None and md.is_file():
        names = []
        for line in md.read_text(encoding="utf-8").splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells and cells[0] and cells[0] != "Dataset" and not set(cells[0]) <= set("-: "):
                names.append(cells[0].replace(" ", ""))
        return names
    root = autofj_package_dir()
    return sorted(p.name for p in root.iterdir() if (p / "gt.csv").is_file())


def _csv_column(path: Path, *columns: str) -> list[tuple[str, ...]]:
    if not path.is_file():
        raise DatasetMissing(f"AutoFJ table not found: {path}")
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        if not set(columns) <= set(reader.fieldnames or ()):
            raise ValueError(f"{path}: expected columns {columns}, got {reader.fieldnames}")
        return [tuple(row[c] for c in columns) for row in reader]


def load_autofj(name: str) -> JoinTable:
    root = autofj_package_dir() / name
    left = [t for (t,) in _csv_column(root / "left.csv", "title")]
    right = [t for (t,) in _csv_column(root / "right.csv", "title")]
    gold = dict((r, l) for l, r in _csv_column(root / "gt.csv", "title_l", "title_r"))
    return JoinTable(name, left, right, gold)
