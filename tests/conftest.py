"""Shared helpers for the unit tests: small MediaWiki XML dumps built in the test.

The dump layout follows a real ``pages-articles`` export (the same shape as the enwiki
excerpt shipped with gensim): a <siteinfo> header with <namespaces>, then one <page>
per block with <title>, <ns>, <id>, an optional <redirect title=...>, and a <revision>.
"""
from __future__ import annotations

import functools
import os
import uuid
from xml.sax.saxutils import escape, quoteattr

import fsspec
import hypothesis
import prefect.testing.utilities
import pytest

from storage.datasets import Dataset

# The tests compare vectors with PyTorch's at fp32 tolerances; on a bf16 CPU the default engine
# is openvino-bf16 (docs/using-the-model.md#engines), so the suite pins the exact one. The choice itself
# is tested in test_onnx_backend with the hardware probe replaced.
os.environ.setdefault("PEARL_BACKEND", "onnx")
# botocore (s3fs) looks for credentials at the EC2 metadata address when none are set: the tests reach
# no address off this machine (tests/s3_stack.py gives the S3 tests theirs, on loopback).
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

from tests.e2e_fixtures import first, stack  # noqa: F401  (session fixtures of the e2e tests)
from tests.s3_stack import s3_root, s3_server  # noqa: F401  (the S3-compatible server of the storage tests)

# scripts/test.sh runs the suite on two pytest-xdist processes (--dist loadfile): a module's tests
# stay together on one process (its module fixtures, servers and builds made once), and so do the
# e2e tests that share the session's Prefect stack and corpus (tests/e2e_fixtures.py). The longest
# groups are handed out first so that the short ones fill in at the end (without it the longest
# could start last and run alone).
SHARED_STACK = ("test_e2e.py", "test_e2e_retrain.py")
LONGEST_FIRST = ("e2e-stack", "test_real_cluster.py", "test_s3_pipeline.py", "test_incremental_corpus.py",
                 "test_train_flow.py", "test_stage_rates.py", "test_evaluate_flow.py", "test_quickstart.py",
                 "test_link_flow.py", "test_prefect_ui.py")


def group_of(nodeid: str) -> str:
    """The group a test runs in: its module's file name, or ``e2e-stack`` for the modules of SHARED_STACK."""
    name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return "e2e-stack" if name in SHARED_STACK else name


def pytest_xdist_make_scheduler(config, log):
    # xdist's loadgroup cannot join two modules under pytest 9 (it renames items through the
    # `_nodeid` attribute, which pytest 9's nodeid no longer reads): loadfile's scheduler, by group
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ByGroup(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ByGroup(config, log)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the order the controller hands the groups out in
        rank = {g: i for i, g in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))


# A Prefect test server starts in a few seconds on a quiet machine; beside the other process's tests
# it can take longer than the harness's 30 s default.
_harness = prefect.testing.utilities.prefect_test_harness
prefect.testing.utilities.prefect_test_harness = functools.partial(_harness, server_startup_timeout=120)

# The property-based suites (tests/test_doors_*.py) run a fixed example budget in CI, derandomised
# so a CI failure replays; HYPOTHESIS_PROFILE=nightly runs ten times the examples with fresh seeds.
hypothesis.settings.register_profile(
    "ci", max_examples=40, derandomize=True, deadline=None, print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.function_scoped_fixture])
hypothesis.settings.register_profile(
    "nightly", max_examples=400, deadline=None, print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.function_scoped_fixture])
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

HEADER = b"""<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:schemaLocation="http://www.mediawiki.org/xml/export-0.10/ http://www.mediawiki.org/xml/export-0.10.xsd" version="0.10" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>enwiki</dbname>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
    <generator>MediaWiki 1.27.0-wmf.22</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="-2" case="first-letter">Media</namespace>
      <namespace key="-1" case="first-letter">Special</namespace>
      <namespace key="0" case="first-letter" />
      <namespace key="1" case="first-letter">Talk</namespace>
      <namespace key="4" case="first-letter">Wikipedia</namespace>
      <namespace key="6" case="first-letter">File</namespace>
      <namespace key="10" case="first-letter">Template</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""
FOOTER = b"</mediawiki>\n"


def page_xml(page_id: int, title: str, text: str | None, ns: int = 0, redirect: str | None = None) -> bytes:
    """One <page> block, lines indented as in a real export; text=None gives <text />."""
    lines = [
        "  <page>",
        f"    <title>{escape(title)}</title>",
        f"    <ns>{ns}</ns>",
        f"    <id>{page_id}</id>",
    ]
    if redirect is not None:
        lines.append(f"    <redirect title={quoteattr(redirect)} />")
    lines += [
        "    <revision>",
        f"      <id>{page_id * 100 + 1}</id>",
        "      <timestamp>2016-01-01T00:00:00Z</timestamp>",
        "      <contributor>",
        "        <username>Editor</username>",
        "        <id>7</id>",
        "      </contributor>",
        "      <model>wikitext</model>",
        "      <format>text/x-wiki</format>",
    ]
    if text is None:
        lines.append('      <text xml:space="preserve" />')
    else:
        lines.append(f'      <text xml:space="preserve">{escape(text)}</text>')
    lines += ["    </revision>", "  </page>"]
    return ("\n".join(lines) + "\n").encode("utf-8")


def mediawiki_dump(*pages: bytes) -> bytes:
    return HEADER + b"".join(pages) + FOOTER


@pytest.fixture
def root(tmp_path) -> str:
    """A local storage root (absolute path, as resolve_root would give)."""
    return str(tmp_path / "store")


@pytest.fixture
def memory_root():
    """A private root on fsspec's in-memory filesystem, removed afterwards."""
    name = f"pearl-test-{uuid.uuid4().hex}"
    url = f"memory://{name}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(f"/{name}"):
        fs.rm(f"/{name}", recursive=True)


def dataset(root: str, name: str, schema, version: str = "v1") -> Dataset:
    return Dataset(root, name, version, schema)


def tiny_model_dir(d, words, seed: int = 0):
    """A random-weight BERT saved in ``d`` as a backbone directory (mean pooling, 16 dimensions) whose
    vocabulary is ``words``: the CLI and the linking tests load it as any model, in a second."""
    import json

    import torch
    import transformers

    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(words)))
    transformers.BertTokenizerFast(str(d / "vocab.txt")).save_pretrained(d)
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=len(words) + 5, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    transformers.BertModel(cfg, add_pooling_layer=False).save_pretrained(d)
    (d / "pearl_backbone.json").write_text(json.dumps({"pooling": "mean", "query_prefix": "",
                                                       "add_pooling_layer": False}))
    return d


# JSON lines with one bad record of each kind between two good ones (issue 45 item 8): each
# (line, expected quarantine reason or None for a kept record, or "skip" for a blank line).
BAD_JSONL = [
    (b'{"title": "Alpha", "text": "Alpha is the first letter. It comes before beta."}', None),
    (b"[" * 100_000, "malformed_json"),  # RecursionError in json.loads
    (b'{"id": 99999999999999999999, "title": "Huge", "text": "Huge id."}', "page_id_out_of_range"),
    ('{"id": "\u00b2", "title": "Squared", "text": "A superscript two."}'.encode(), "malformed_record"),
    (b'{"title": "Caf\xe9", "text": "latin-1"}', "invalid_utf8"),
    (b"", "skip"),
    (b'["a", "list"]', "malformed_record"),
    (b'{"title": "Lone \\ud800 surrogate", "text": "x."}', "malformed_record"),  # not encodable as UTF-8
    (b'{"id": ' + b"1" * 5000 + b', "title": "Digits", "text": "x."}', "malformed_json"),  # int digit limit
    (b'{"id": 7, "title": "Beta", "text": "Beta is the second letter of the alphabet."}', None),
]


def bad_jsonl() -> bytes:
    return b"\n".join(line for line, _ in BAD_JSONL) + b"\n"


@pytest.fixture
def no_model(monkeypatch):
    """Records whether the CLI got as far as loading a model (it must not, on bad input)."""
    import pearl_cli.main as cli

    loaded = []
    monkeypatch.setattr(cli, "_encoder", lambda spec, backend="auto": loaded.append(spec))
    return loaded


def tiny_benchmark(root, words, turney: int = 40, bird: int = 60) -> None:
    """Turney and BIRD files in the authors' formats under ``root``, drawn from ``words`` (seeded)."""
    import numpy as np

    rng = np.random.default_rng(0)
    (root / "turney").mkdir(parents=True)
    (root / "turney" / "turney.txt").write_text("".join(
        f"{a} {b} | {c} | {a} | {b} | " + " | ".join(rng.choice(words, 4)) + "\n"
        for a, b, c in (rng.choice(words, 3) for _ in range(turney))))
    (root / "bird").mkdir()
    (root / "bird" / "bird.txt").write_text("term1\tterm2\trelatedness score\n" + "".join(
        f"{a} {b}\t{c} {d}\t{rng.random():.3f}\n" for a, b, c, d in (rng.choice(words, 4) for _ in range(bird))))


def dev_sample(bench, out):
    """The benchmark's dev splits cut to a sample (CoNLL's first 500 lines, BC5CDR's first 600, 1,500
    shuffled PPDB-filtered pairs), with Turney, BIRD and CoNLL's test file whole: a checkpoint chosen
    through every dev signal of the recipe and scored on the evaluation's tasks, at a fraction of the
    full splits' cost (their encodes, probes and KMeans draws were most of each training test's time)."""
    import json
    import random
    import shutil

    for name, lines in (("conll2003", 500), ("bc5cdr", 600)):
        (out / name).mkdir(parents=True)
        head = (bench / name / "dev.json").read_text(encoding="utf-8").splitlines()[:lines]
        (out / name / "dev.json").write_text("\n".join(head) + "\n", encoding="utf-8")
    (out / "ppdb").mkdir()
    pairs = json.loads((bench / "ppdb" / "ppdb_filtered.json").read_text(encoding="utf-8"))
    random.Random(0).shuffle(pairs)  # the file is grouped by phrase: a head would hold a few
    (out / "ppdb" / "ppdb_filtered.json").write_text(json.dumps(pairs[:1500]), encoding="utf-8")
    for name in ("bird", "turney"):
        shutil.copytree(bench / name, out / name)
    shutil.copy(bench / "conll2003" / "test.json", out / "conll2003")  # the evaluation's entity map
    return out


@pytest.fixture(scope="session")
def dev_bench(tmp_path_factory):
    """:func:`dev_sample` of the PEARL benchmark beside the checkout, made once a session; None without it."""
    from pathlib import Path

    from pearl_model.evaluation.data import default_benchmark_dir

    bench = default_benchmark_dir()
    return None if bench is None else dev_sample(Path(bench), tmp_path_factory.mktemp("dev-sample"))


def part_file(d: Dataset, index: int) -> str:
    """Where part ``index`` of ``d`` is stored: for tests that damage or inspect a file (the pipeline
    reads parts only through the Dataset)."""
    return f"{d.path}/{d.part_name(index)}"


def stored_parts(d: Dataset) -> list[str]:
    """The stored files of a committed dataset's parts, in order."""
    return [part_file(d, p.index) for p in d.parts()]
