"""The storage doors driven with bad input (issue 54): dataset and file-set manifests, ``_latest.json``
pointers, the registry's ``current.json`` and history files.

Each bad file ends in one line of a documented type (ManifestError / UnsafeManifest for manifests
and ``_latest.json``, RegistryError for the registry's files), reads nothing outside the storage
root (a sentinel file beside the root is never opened: Python's audit hook sees fsspec's opens, its
access time sees pyarrow's own) and leaves no file behind. The example budget is the conftest
profile's ("ci", or HYPOTHESIS_PROFILE=nightly)."""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import sys
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from storage.datasets import MANIFEST, Dataset, ManifestError, UnsafeManifest, latest_version
from storage.files import FileSet
from storage.registry import ModelRegistry, RegistryError, resolve_model
from storage.schemas import SENTENCES
from tasks import phrase_occurrences as occ_stage
from tests.test_phrase_stages import params, sentences_dataset
from tests.conftest import part_file  # noqa: E402

_OPENED: list[str] | None = None  # the paths Python opened while a check runs


def _audit(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # cannot be removed: it records only while _OPENED is a list


class Sentinel:
    """A Parquet file of sentences beside the storage root that no reader may open."""

    TEXT = "Zanzibar Quokka Sentinel visited Xylophone Harbour in 1901."

    def __init__(self, where: Path):
        self.path = where / "outside.parquet"
        pq.write_table(pa.Table.from_pylist([{"sentence_id": 1, "page_id": 1, "index": 0, "text": self.TEXT}],
                                            schema=SENTENCES), self.path)
        self.reset()

    def reset(self) -> None:
        # atime before mtime: on relatime (and strictatime) mounts the next read moves it
        os.utime(self.path, ns=(0, self.path.stat().st_mtime_ns))

    def untouched(self, opened: list[str]) -> bool:
        return self.path.stat().st_atime_ns == 0 and not any(
            os.path.realpath(p) == str(self.path.resolve()) for p in opened)


def files_under(root: Path) -> dict[str, bytes | str]:
    """Each file's bytes, each symbolic link's target (never followed: it may point at the sentinel)."""
    return {p.relative_to(root).as_posix(): os.readlink(p) if p.is_symlink() else p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_symlink() or p.is_file()}


def refused(call, errors: type[Exception] | tuple, sentinel: Sentinel, root: Path) -> Exception:
    """Run ``call``: it must raise one of ``errors`` in one line, open nothing outside ``root`` and
    change no file under it. Returns the error."""
    global _OPENED
    before, _OPENED = files_under(root), []
    try:
        with pytest.raises(errors) as caught:
            call()
    finally:
        opened, _OPENED = _OPENED, None
    message = str(caught.value)
    assert message and "\n" not in message, f"not one line: {message!r}"
    assert sentinel.untouched(opened), f"{sentinel.path} was read: {[p for p in opened if 'outside' in p]}"
    assert files_under(root) == before, "a file was left behind or changed"
    return caught.value


@pytest.fixture
def place(tmp_path):
    """A fresh (root, sentinel) per example: the sentinel beside the root, in tmp_path."""
    def make() -> tuple[Path, Sentinel]:
        here = tmp_path / uuid.uuid4().hex
        (here / "root").mkdir(parents=True)
        return here / "root", Sentinel(here)
    return make


def test_atime_sees_a_read(tmp_path):
    """The sentinel's access time moves when pyarrow reads it (what `untouched` relies on beside the
    audit hook, which does not see pyarrow's native reads)."""
    s = Sentinel(tmp_path)
    pq.read_table(str(s.path))
    assert not s.untouched([])


# --- the reproduction (issue 54, item 2) -------------------------------------------------------------
def test_phrase_occurrences_never_mines_a_part_outside_its_version(place):
    """A manifest naming ``../../../outside.parquet``: plan_chunks joined it by hand and write_chunk
    mined the sentinel's sentence; Dataset.read refused the same manifest. Now both refuse it."""
    root, sentinel = place()
    s = sentences_dataset(str(root), [["The capital of France is Paris."]])
    manifest = json.loads((root / "sentences" / "s1" / MANIFEST).read_text())
    manifest["parts"].append({"file": "../../../outside.parquet", "rows": 1})
    manifest["rows"] += 1
    (root / "sentences" / "s1" / MANIFEST).write_text(json.dumps(manifest))
    refused(s.read, UnsafeManifest, sentinel, root)
    p = params(parser="pmi")
    out = occ_stage.plan_outputs(s, p)

    def mine_everything():
        for chunk in occ_stage.plan_chunks(s, 4):
            occ_stage.write_chunk(s, chunk, out, p)
    error = refused(mine_everything, UnsafeManifest, sentinel, root)
    assert "'../../../outside.parquet' is not a relative path inside the version" in str(error)


# --- generated bad manifests -------------------------------------------------------------------------
_SEGMENTS = st.sampled_from(["..", ".", "", "a", "part-00000.parquet", "outside.parquet", "~", "*"])
_BAD_NAMES = st.one_of(
    st.sampled_from(["../../../outside.parquet", "..", "/", "", ".", "a//b", "a/../../../../outside.parquet",
                     "s3://bucket/part.parquet", "file:///etc/passwd", "..\\..\\..\\outside.parquet",
                     "part\\..\\x", "/etc/passwd", "part-00000.parquet/", "x\0.parquet", "x\n.parquet"]),
    st.builds(lambda sentinel_rel: sentinel_rel, st.just("ABSOLUTE")),  # replaced by the sentinel's absolute path
    st.lists(_SEGMENTS, min_size=1, max_size=6).map("/".join).filter(
        lambda n: any(s in ("", ".", "..") for s in n.split("/"))),
    st.tuples(st.text(max_size=5), st.sampled_from(["\0", "\x7f", "\\", "\r"]), st.text(max_size=5)).map("".join),
    st.builds(lambda scheme, rest: f"{scheme}://{rest}", st.from_regex(r"[a-z][a-z0-9+]{0,5}", fullmatch=True),
              st.text(max_size=10)),
    st.none(), st.integers(), st.floats(allow_nan=False), st.booleans(), st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _name(name, sentinel: Sentinel):
    return str(sentinel.path) if name == "ABSOLUTE" else name


def _dataset_with_manifest(root: Path, edit) -> Dataset:
    """Two good parts of sentences (1 and 2 rows), then ``edit(manifest dict) -> str or bytes`` as its manifest."""
    s = sentences_dataset(str(root), [["The capital of France is Paris."], ["Paris is in France.", "So it is."]])
    path = root / "sentences" / "s1" / MANIFEST
    text = edit(json.loads(path.read_text()))
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return s


def _dataset_readers(s: Dataset):
    return [s.read, s.parts, lambda: list(s.iter_batches()), lambda: occ_stage.plan_chunks(s, 1)]


@given(name=_BAD_NAMES, at=st.integers(0, 2), rows=st.integers(0, 3))
def test_a_bad_part_name_is_refused_before_any_part_is_read(place, name, at, rows):
    root, sentinel = place()

    def edit(m):
        m["parts"].insert(at, {"file": _name(name, sentinel), "rows": rows})
        m["rows"] += rows
        return json.dumps(m)
    s = _dataset_with_manifest(root, edit)
    for read in _dataset_readers(s):
        assert "is not a relative path inside the version" in str(refused(read, UnsafeManifest, sentinel, root))


@given(at=st.integers(0, 1), how=st.sampled_from(["file", "directory", "chain", "inside"]))
def test_a_part_that_is_a_symbolic_link_is_refused_unread_wherever_it_points(place, at, how):
    """A part name inside the version that is a symbolic link (to the sentinel, to a directory holding
    it, through a link inside the version, or to the other part of the same version, which its digest
    would pass) is refused before any part is read: a link in a version is never followed."""
    root, sentinel = place()
    s = _dataset_with_manifest(root, json.dumps)
    part = Path(part_file(s, at))
    part.unlink()
    if how == "file":
        part.symlink_to(sentinel.path)
    elif how == "directory":  # the name's directory is the link: sub/part -> outside/part
        m = json.loads(Path(s.path, MANIFEST).read_text())
        m["parts"][at]["file"] = f"sub/{sentinel.path.name}"
        Path(s.path, MANIFEST).write_text(json.dumps(m))
        Path(s.path, "sub").symlink_to(sentinel.path.parent, target_is_directory=True)
    elif how == "chain":
        Path(s.path, "hop").symlink_to(sentinel.path)
        part.symlink_to(Path(s.path, "hop"))
    else:
        part.symlink_to(Path(part_file(s, 1 - at)).name)
    for read in _dataset_readers(s):
        assert "is a symbolic link" in str(refused(read, UnsafeManifest, sentinel, root))


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                     lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
                     max_leaves=8)
_COUNTS = st.one_of(st.integers(max_value=-1), st.integers(min_value=10**9), st.floats(), st.booleans(),
                    st.text(max_size=4), st.none(), st.lists(st.integers(), max_size=2))
_NAMELESS = st.dictionaries(st.text(max_size=4).filter(lambda k: k != "file"), _JSON, max_size=2)  # no "file": no name


@st.composite
def bad_manifests(draw, text: str) -> tuple[bytes, bool]:
    """A dataset manifest (``text``, valid, two parts) made wrong in one way; True when only its
    counts are wrong but they add up (huge: no part holds them)."""
    m = json.loads(text)
    how = draw(st.sampled_from(["truncated", "bytes", "top", "parts", "part", "rows", "total", "huge", "missing"]))
    if how == "truncated":
        return text[:draw(st.integers(0, len(text) - 1))].encode(), False
    if how == "bytes":
        return draw(st.binary(max_size=20)) + b"\xff", False  # never UTF-8
    if how == "top":
        return json.dumps(draw(_JSON.filter(lambda v: not isinstance(v, dict)))).encode(), False
    if how == "parts":
        m["parts"] = draw(_JSON.filter(lambda v: not isinstance(v, list) or any(not isinstance(p, dict) for p in v)))
    elif how == "part":
        m["parts"][draw(st.integers(0, 1))] = draw(_NAMELESS)
    elif how == "rows":
        m["parts"][draw(st.integers(0, 1))]["rows"] = draw(_COUNTS)
    elif how == "total":
        m["rows"] = draw(_COUNTS | st.integers(0, 100).filter(lambda n: n != 3))
    elif how == "huge":  # counts that add up but that no part holds: a plan by them would never end
        n = draw(st.integers(10**6, 10**18))
        m["parts"][1]["rows"], m["rows"] = n, m["parts"][0]["rows"] + n
    else:
        del m[draw(st.sampled_from(["parts", "rows"]))]
    return json.dumps(m).encode(), how == "huge"


@given(data=st.data())
def test_a_bad_manifest_ends_in_one_line(place, data):
    root, sentinel = place()
    huge = []

    def edit(m):
        text, counts_only = data.draw(bad_manifests(json.dumps(m, indent=2)))
        huge.append(counts_only)
        return text
    s = _dataset_with_manifest(root, edit)
    # counts that add up are taken as they are by a read (it reads what the parts hold); a plan by
    # the counts checks them against the parts' footers
    for read in _dataset_readers(s)[-1:] if huge[0] else _dataset_readers(s):
        refused(read, ManifestError, sentinel, root)


def stored_fileset(root: Path) -> FileSet:
    src = root.parent / "model"
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text("{}")
    (src / "sub" / "w.bin").write_bytes(b"\0" * 16)
    f = FileSet(str(root), "models", "m1")
    f.upload(src, code_version="t", params={}, inputs={})
    return f


@given(name=_BAD_NAMES, how=st.sampled_from(["name", "files", "bytes", "dir"]), data=st.data())
def test_a_bad_file_set_manifest_is_refused(place, tmp_path, name, how, data):
    root, sentinel = place()
    f = stored_fileset(root)
    path = root / "models" / "m1" / MANIFEST
    m = json.loads(path.read_text())
    if how == "name":
        m["files"][1]["file"] = _name(name, sentinel)
    elif how == "files":  # not a list of objects, or objects without a name
        m["files"] = data.draw(_JSON.filter(lambda v: not isinstance(v, list) or any(not isinstance(e, dict) for e in v))
                               | st.lists(_NAMELESS, min_size=1, max_size=2))
    elif how == "bytes":
        m["files"][0]["bytes"] = data.draw(_COUNTS.filter(lambda v: not (type(v) is int and v >= 0)))
    else:
        assume(name)  # no "dir" (None, "", 0) means the version directory itself
        m["dir"] = _name(name, sentinel)
    path.write_text(json.dumps(m))
    refused(lambda: f.local_copy(tmp_path / "cache"), ManifestError, sentinel, root)
    if how == "dir":
        refused(lambda: f.read_bytes("config.json"), UnsafeManifest, sentinel, root)


# --- generated bad pointers ----------------------------------------------------------------------------
_BAD_VERSIONS = st.one_of(
    st.sampled_from(["../../outside", "../../../outside.parquet", "/etc", "ABSOLUTE", "s3://b/m", "m1/../..", "",
                     "m1\0", "-m1", "m" * 65, "..", "~"]),
    st.text(max_size=8).filter(lambda v: not (v[:1].isascii() and v[:1].isalnum()
                                              and all(c.isascii() and (c.isalnum() or c in "-_") for c in v))),
    st.none(), st.integers(), st.lists(st.text(max_size=2), max_size=2), st.dictionaries(st.text(max_size=2), st.none(),
                                                                                       max_size=1))


@st.composite
def bad_pointer_text(draw, good: dict, sentinel: Sentinel, fields: tuple[str, ...]) -> str:
    """``good`` (a pointer) made wrong in one way: cut short, not an object, a version that is no
    version (the sentinel's path among them), or a history that is not a list, or a field missing."""
    how = draw(st.sampled_from(["truncated", "json", "missing", *fields]))
    text = json.dumps(good)
    if how == "truncated":
        return text[:draw(st.integers(0, len(text) - 1))]
    if how == "json":
        return json.dumps(draw(_JSON.filter(lambda v: not isinstance(v, dict))))
    m = dict(good)
    if how == "missing":
        del m[draw(st.sampled_from([f for f in fields if f != "previous"]))]
    elif how == "history":
        m["history"] = draw(_JSON.filter(lambda v: not isinstance(v, list)))
    else:  # a version, or the previous one (None there means none)
        m[how] = _name(draw(_BAD_VERSIONS.filter(lambda v: v is not None or how == "version")), sentinel)
    return json.dumps(m)


@given(data=st.data(), where=st.sampled_from(["current", "history", "newer"]))
def test_a_bad_registry_pointer_ends_in_one_line(place, data, where):
    """current.json, the history file it points at, or a newer history file (a promotion cut short)."""
    root, sentinel = place()
    reg = ModelRegistry(str(root))
    good = {"version": "m1", "url": "x", "promoted_at": "t", "reason": "r", "previous": None,
            "history": [{"version": "m1", "at": "t", "action": "promote", "reason": "r", "previous": None}]}
    (root / "registry" / "history").mkdir(parents=True)
    (root / "registry" / "history" / "00000001.json").write_text(json.dumps(good))
    (root / "registry" / "current.json").write_text(json.dumps(good))
    bad = data.draw(bad_pointer_text(good, sentinel, ("version", "previous", "history")))
    if where == "current":
        (root / "registry" / "current.json").write_text(bad)
        (root / "registry" / "history" / "00000001.json").unlink()
    elif where == "history":
        (root / "registry" / "current.json").unlink()
        (root / "registry" / "history" / "00000001.json").write_text(bad)
    else:
        (root / "registry" / "history" / "00000002.json").write_text(bad)
    for read in (reg.pointer, reg.current_version, reg.current_model, lambda: resolve_model("current", reg, "b"),
                 lambda: reg.rollback()):
        refused(read, RegistryError, sentinel, root)


@given(n=st.integers(0, 5), shown=st.integers(0, 5))
def test_a_history_file_that_does_not_move_forward_is_refused(place, n, shown):
    """History file k holds a pointer with k promotions: one that says otherwise would send the
    reader back (an endless loop) or skip files."""
    root, sentinel = place()
    reg = ModelRegistry(str(root))
    (root / "registry" / "history").mkdir(parents=True)
    entry = {"version": "m1", "at": "t", "action": "promote", "reason": "r", "previous": None}
    for k in range(1, n + 1):
        (root / "registry" / "history" / f"{k:08d}.json").write_text(
            json.dumps({"version": "m1", "previous": None, "history": [entry] * k}))
    (root / "registry" / "history" / f"{n + 1:08d}.json").write_text(
        json.dumps({"version": "m1", "previous": None, "history": [entry] * shown}))
    if shown == n + 1:
        assert reg.current_version() == "m1"
    else:
        assert "history is not a list of" in str(refused(reg.pointer, RegistryError, sentinel, root))


@given(data=st.data())
def test_a_bad_latest_pointer_ends_in_one_line(place, data):
    root, sentinel = place()
    sentences_dataset(str(root), [["One sentence."]])
    good = json.loads((root / "sentences" / "_latest.json").read_text())
    (root / "sentences" / "_latest.json").write_text(data.draw(bad_pointer_text(good, sentinel, ("version",))))
    refused(lambda: latest_version(str(root), "sentences"), ManifestError, sentinel, root)


@given(data=st.data())
def test_a_bad_registry_entry_ends_in_one_line(place, data):
    """A model's entry (registry/models/<version>.json), as `pearl models list` and the registry
    artifact read it: cut short, not an object, a field missing or of another type, another version."""
    root, sentinel = place()
    reg = ModelRegistry(str(root))
    good = {"version": "m1", "url": "x", "training_set": "t1", "training": {"steps": 3}, "trained_at": "t",
            "registered_at": "t", "benchmark": None, "decision": None}
    how = data.draw(st.sampled_from(["truncated", "json", "missing", "type", "version"]))
    text = json.dumps(good)
    if how == "truncated":
        text = text[:data.draw(st.integers(0, len(text) - 1))]
    elif how == "json":
        text = json.dumps(data.draw(_JSON.filter(lambda v: not isinstance(v, dict))))
    elif how == "missing":
        gone = data.draw(st.sampled_from(["version", "url", "training", "trained_at"]))
        text = json.dumps({k: v for k, v in good.items() if k != gone})
    elif how == "type":
        field = data.draw(st.sampled_from(["training", "trained_at", "registered_at", "benchmark", "decision"]))
        text = json.dumps(good | {field: data.draw(st.one_of(st.integers(), st.lists(st.none(), max_size=1),
                                                               st.just(True)))})
    else:
        version = data.draw(_BAD_VERSIONS.filter(lambda v: v is not None) | st.just("m2"))
        text = json.dumps(good | {"version": _name(version, sentinel)})
    (root / "registry" / "models").mkdir(parents=True)
    (root / "registry" / "models" / "m1.json").write_text(text)
    for read in (reg.entries, reg.summary, lambda: reg.entry("m1")):
        refused(read, RegistryError, sentinel, root)


# --- one door for an array beside a dataset's parts (Dataset.read_array) -----------------------------
def _array_dataset(root: Path, array: np.ndarray) -> Dataset:
    d = Dataset(str(root), "word_vectors", "v1", SENTENCES)
    d.write_part(0, pa.Table.from_pylist([], schema=SENTENCES))
    d.commit(code_version="t", params={}, inputs={}, extra={"files": [d.write_array("a.npy", array)]})
    return d


@given(array=st.lists(st.floats(width=32, allow_nan=False), min_size=0, max_size=40),
       cut=st.integers(0, 400), junk=st.binary(max_size=64), how=st.sampled_from(
           ["as written", "truncated", "appended", "flipped", "object array", "entry", "name", "missing"]),
       data=st.data())
def test_an_array_beside_the_parts_is_the_one_written_or_refused(place, array, cut, junk, how, data):
    """Whatever happens to the file or its manifest entry, read_array returns exactly the array that was
    written or raises ManifestError in one line, reading nothing outside the root and unpickling nothing."""
    root, sentinel = place()
    written = np.asarray(array, np.float32)
    d = _array_dataset(root, written)
    path, manifest_path = Path(d.path, "a.npy"), Path(d.path, MANIFEST)
    raw = path.read_bytes()
    manifest = json.loads(manifest_path.read_text())
    entry = manifest["extra"]["files"][0]
    if how == "truncated":
        path.write_bytes(raw[:min(cut, len(raw) - 1)])
    elif how == "appended":
        path.write_bytes(raw + junk + b"\0")
    elif how == "flipped":
        i = cut % len(raw)
        path.write_bytes(raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1:])
    elif how == "object array":  # a pickle, with a manifest entry that matches it
        buffer = io.BytesIO()
        np.save(buffer, np.array([sentinel.path], dtype=object), allow_pickle=True)
        path.write_bytes(buffer.getvalue())
        entry.update(bytes=len(buffer.getvalue()), sha256=hashlib.sha256(buffer.getvalue()).hexdigest())
    elif how == "entry":
        entry[data.draw(st.sampled_from(["bytes", "sha256"]))] = data.draw(st.none() | st.integers() | st.text())
    elif how == "name":  # a name that would land outside the version
        drawn = data.draw(_BAD_NAMES)
        entry["file"] = str(sentinel.path) if drawn == "ABSOLUTE" else drawn
    elif how == "missing":
        path.unlink()
    manifest_path.write_text(json.dumps(manifest))
    if how == "as written" or (how == "entry" and entry["bytes"] == len(raw)
                               and entry["sha256"] == hashlib.sha256(raw).hexdigest()):
        got = d.read_array("a.npy")
        assert got.dtype == written.dtype and np.array_equal(got, written)
    else:
        refused(lambda: d.read_array(entry["file"]), ManifestError, sentinel, root)


# --- stages that read a part by index (issue 64, defects 2 and 3) ------------------------------------------
@pytest.mark.parametrize("how", ["outside", "inside"])
def test_the_pages_stage_never_reads_a_raw_part_that_is_a_link(place, how):
    """A raw_pages part replaced by a symbolic link (out of the root, or to the other part: its digest
    would not pass, but a link is refused before that): `Dataset.parts` refused the first already, and
    the pages stage read it by index and wrote its text as sentences (on the old main). Now the one
    reader refuses it, in one line, and the stage writes nothing."""
    import pyarrow as pa

    from storage.schemas import RAW_PAGES
    from tasks.pages import extract_part, plan_page_outputs
    from tests.test_pages import NO_DUPLICATES, PARAMS, _raw_dataset

    root, sentinel = place()
    raw = _raw_dataset(str(root))
    outside = sentinel.path.with_name("raw.parquet")
    page = {"seq": 0, "page_id": 7, "title": "Sentinel", "namespace": 0, "text_format": "wikitext",
            "text": f"{Sentinel.TEXT} {Sentinel.TEXT}"}
    pq.write_table(pa.Table.from_pylist([{k: page.get(k) for k in RAW_PAGES.names}], schema=RAW_PAGES), outside)
    part = Path(part_file(raw, 0))
    part.unlink()
    part.symlink_to(outside if how == "outside" else Path(part_file(raw, 1)).name)
    out = plan_page_outputs(raw, PARAMS)
    error = refused(lambda: extract_part(raw, 0, out, NO_DUPLICATES, n_buckets=4), UnsafeManifest, sentinel, root)
    assert "part-00000.parquet is a symbolic link" in str(error)
    assert not any(d.written_parts() for d in out.all())


def test_an_evaluation_attempts_part_no_writer_recorded_is_computed_not_served(tmp_path, monkeypatch):
    """A part put by hand into an uncommitted evaluation attempt was served as scores ("reusing scores
    from an earlier attempt", then bird 99.0) on the old main; a file without a writer's record is
    never used: the model is scored."""
    import pyarrow as pa

    from storage.schemas import EVAL_RESULTS
    from tasks import evaluation

    out = Dataset(str(tmp_path), "eval_results", "e1", EVAL_RESULTS)
    forged = {name: None for name in EVAL_RESULTS.names}
    forged.update(model="m", task="similarity", dataset="bird", metric="pearson", value=99.0, std=0.0, n=1)
    os.makedirs(out.path)
    pq.write_table(pa.Table.from_pylist([forged], schema=EVAL_RESULTS), part_file(out, 0))
    scored = [{**forged, "value": 41.5}]
    monkeypatch.setattr(evaluation, "evaluate_model", lambda *a, **k: scored)
    monkeypatch.setattr(evaluation, "get_run_logger", lambda: logging.getLogger("test"))
    rows = evaluation.evaluate_model_task.fn("m", out, 0, str(tmp_path), None, [0], None)
    assert [r["value"] for r in rows] == [41.5]
    assert [r["value"] for r in out.read_part(0).to_pylist()] == [41.5]
    assert out.commit(code_version="c", params={}, inputs={})["stats"] == {"parts_recomputed": 1}


# --- the verified reader over every kind of file the project writes (issue 64) -------------------------
def _kinds(root: Path):
    """(name, what reads it, its path, another file of its kind) for each kind of stored file."""
    import numpy as np

    from storage.verified import read_recorded, write_recorded

    s = sentences_dataset(str(root), [["The capital of France is Paris."], ["Paris is in France.", "So it is."]])
    arrays = Dataset(str(root), "word_vectors", "w1", SENTENCES)
    entries = [arrays.write_array(n, np.arange(12, dtype=np.float32).reshape(3, 4) + k) for k, n in
               enumerate(("a.npy", "b.npy"))]
    arrays.commit(code_version="t", params={}, inputs={}, extra={"files": entries})
    attempt = Dataset(str(root), "sentences", "s2", SENTENCES)
    for i in range(2):
        attempt.write_part(i, s.read_part(i))
    work = f"{root}/link_work/w1"
    for k in range(2):
        write_recorded(s.fs, work, f"index/part-{k:05d}.faiss", bytes(range(k, 200 + k)))
    return [
        ("committed part", lambda: s.read_part(0), part_file(s, 0), part_file(s, 1)),
        ("committed part, streamed", lambda: list(s.iter_batches()), part_file(s, 0), part_file(s, 1)),
        ("attempt's part", lambda: attempt.read_part(0), part_file(attempt, 0), part_file(attempt, 1)),
        (".npy array", lambda: arrays.read_array("a.npy"), f"{arrays.path}/a.npy", f"{arrays.path}/b.npy"),
        ("link work file", lambda: read_recorded(s.fs, work, "index/part-00000.faiss", work),
         f"{work}/index/part-00000.faiss", f"{work}/index/part-00001.faiss"),
    ]


@given(kind=st.integers(0, 4), damage=st.sampled_from(["truncate", "flip", "swap", "link", "grow"]),
       at=st.floats(0, 1, exclude_max=True))
def test_the_verified_reader_refuses_every_kind_of_damage_in_one_line(place, kind, damage, at):
    """Every kind of file the project writes, truncated, a byte flipped, swapped for another of its kind,
    replaced by a link (to the other file: its bytes could pass another's digest) or grown: the read
    is refused in one line that names the file, nothing outside the root is opened, and nothing
    under it changes."""
    root, sentinel = place()
    name, read, path, other = _kinds(root)[kind]
    data = Path(path).read_bytes()
    cut = int(at * len(data))
    Path(path).unlink()
    if damage == "link":
        Path(path).symlink_to(other)
    else:
        Path(path).write_bytes({"truncate": data[:cut], "flip": data[:cut] + bytes([data[cut] ^ 0x10]) + data[cut + 1:],
                                "swap": Path(other).read_bytes(), "grow": data + data[:1 + cut]}[damage])
    error = refused(read, ManifestError, sentinel, root)
    assert Path(path).name in str(error), (name, str(error))


@given(wrong=st.integers(-3, 3).filter(bool))
def test_a_manifest_that_lists_a_wrong_size_refuses_the_part(place, wrong):
    root, sentinel = place()
    s = _dataset_with_manifest(root, json.dumps)
    m = json.loads(Path(s.path, MANIFEST).read_text())
    m["parts"][0]["bytes"] += wrong
    Path(s.path, MANIFEST).write_text(json.dumps(m))
    assert "its writer recorded" in str(refused(lambda: s.read_part(0), ManifestError, sentinel, root))
