"""No password in a URL reaches an error, its printed chain, a log line or the CLI's output (issue 54,
item 6): every failure path that takes a storage URL is driven with ``scheme://alice:s3cretPW@...``
URLs, and the secret is looked for in str(exc), in the chain Python and Prefect print under it
(``__cause__``, else ``__context__`` unless suppressed) and in the log records."""
from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from typer.testing import CliRunner

from pearl_cli.main import app
from pearl_model.linking import sides
from pearl_redact import redact
from storage.datasets import Dataset, DatasetIncomplete, file_fingerprint
from storage.registry import ModelRegistry, NoCurrentModel, resolve_model
from storage.schemas import MATCHES
from tasks.matches import plan_link

SECRET = "s3cretPW"
REFUSED = f"ftp://alice:{SECRET}@127.0.0.1:1"  # nothing listens on port 1: refused at once, offline
NO_DRIVER = f"gs://alice:{SECRET}@bucket"  # gcsfs is not installed: the driver's ImportError
S3 = f"s3://alice:{SECRET}@bucket"  # s3fs is: botocore refuses the bucket name, repeating the userinfo
# fsspec's memory filesystem keeps the userinfo in its paths, so its own errors repeat it without a scheme
MEMORY = f"memory://alice:{SECRET}@pearl-redaction-test"


def printed_chain(exc: BaseException) -> list[str]:
    """The messages a traceback of ``exc`` prints: it, then its cause, or its context unless suppressed."""
    out, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ if exc.__cause__ is not None else (None if exc.__suppress_context__ else exc.__context__)
    return out


def assert_no_secret(exc: BaseException, caplog) -> None:
    leaks = [m for m in printed_chain(exc) if SECRET in m]
    leaks += [r.getMessage() for r in caplog.records if SECRET in r.getMessage()]
    assert not leaks, leaks


@pytest.fixture
def memory_tables():
    """A table with a ``title`` column and one without any row, under the credentialed memory root."""
    import fsspec

    fs = fsspec.filesystem("memory")
    base = MEMORY.removeprefix("memory://")
    for name, table in {"ok.csv": pa.table({"title": ["plum"]}), "empty.csv": pa.table({"title": pa.array([], pa.string())}),
                        "blank.csv": pa.table({"title": pa.array([None, " "], pa.string())})}.items():
        with fs.open(f"{base}/{name}", "wb") as f:
            pacsv.write_csv(table, f)
    yield
    fs.rm(f"/{base}", recursive=True)


UNSTATABLE = [f"{REFUSED}/left.csv", f"{NO_DRIVER}/left.parquet", f"{S3}/left.parquet", f"{MEMORY}/missing.csv",
              f"{MEMORY}/left.txt"]
TABLES = [*UNSTATABLE, f"{MEMORY}/ok.csv", f"{MEMORY}/empty.csv"]


@pytest.mark.parametrize("url", TABLES)
def test_reading_a_side_names_the_table_without_its_password(url, memory_tables, caplog):
    caplog.set_level(logging.INFO)  # fsspec logs its paths at DEBUG; the memory filesystem keeps userinfo in them
    for read in (lambda: sides.read_side(url, "name"), lambda: list(sides.iter_column(url, "name", 10)),
                 lambda: sides.read_columns(url, ["left", "right"])):
        with pytest.raises(sides.LinkInputError) as e:
            read()
        assert_no_secret(e.value, caplog)
        assert redact(url) in str(e.value)  # the table is still named


@pytest.mark.parametrize("url", TABLES)
def test_plan_link_names_its_inputs_without_their_password(url, memory_tables, tmp_path, caplog):
    caplog.set_level(logging.INFO)  # fsspec logs its paths at DEBUG; the memory filesystem keeps userinfo in them
    ok = f"{MEMORY}/ok.csv"
    calls = [lambda: plan_link(url, ok, str(tmp_path / "store"), model="minilm"),
             lambda: plan_link(ok, url, str(tmp_path / "store"), model="minilm")]
    if url in UNSTATABLE:  # the labels are stat'ed too
        calls.append(lambda: plan_link(ok, ok, str(tmp_path / "store"), model="minilm", labels=url))
    for call in calls:
        try:
            call()
        except ValueError as e:
            assert_no_secret(e, caplog)
        else:
            assert url in (f"{MEMORY}/ok.csv", f"{MEMORY}/empty.csv")  # read later, by split_side


@pytest.mark.parametrize("url", [f"{REFUSED}/dump.xml", f"{NO_DRIVER}/dump.xml", f"{S3}/dump.xml",
                                 f"{MEMORY}/missing.xml"])
def test_file_fingerprint_without_the_password(url, caplog):
    for error in (None, ValueError):
        with pytest.raises(Exception) as e:
            file_fingerprint(url, error)
        assert_no_secret(e.value, caplog)


def test_a_dump_source_without_its_password(caplog):
    from tasks.raw_pages.sequential import check_sources

    for sources in ([f"{REFUSED}/dump.xml"], [f"{MEMORY}/missing.xml", f"{REFUSED}/dump.xml.bz2"]):
        with pytest.raises(ValueError) as e:
            check_sources(sources)
        assert_no_secret(e.value, caplog)


@pytest.mark.parametrize("root", [f"{REFUSED}/store", f"{MEMORY}/store"])
def test_a_credentialed_storage_root_stays_out_of_errors(root, caplog):
    caplog.set_level(logging.INFO)  # fsspec logs its paths at DEBUG; the memory filesystem keeps userinfo in them
    d = Dataset(root, "matches", "v1", MATCHES)
    assert SECRET not in d.url
    for fail in (d.manifest, d.read):
        with pytest.raises((DatasetIncomplete, OSError)) as e:
            fail()
        assert_no_secret(e.value, caplog)
    with pytest.raises((NoCurrentModel, OSError)) as e:
        ModelRegistry(root).current_model()
    assert_no_secret(e.value, caplog)
    if root.startswith("memory"):  # before the first promotion: a note that names the root
        assert SECRET not in resolve_model("current", root, "minilm").note


def cli(*args):
    r = CliRunner().invoke(app, list(map(str, args)))
    assert SECRET not in r.output, r.output
    return r


def test_the_cli_refuses_credentialed_urls_without_their_password(tmp_path, memory_tables, no_model):
    """The command line's door (issue 64) refuses them before the redactor behind it is reached."""
    good = tmp_path / "good.csv"
    pacsv.write_csv(pa.table({"title": ["plum", "kiwi"]}), good)
    for url in TABLES:
        r = cli("link", url, good, "--left-column", "name", "--out", tmp_path / "m.parquet", "--model", "minilm")
        assert r.exit_code == 2 and "credentials" in r.output, r.output
        r = cli("link", good, good, "--labels", url, "--out", tmp_path / "m.parquet", "--model", "minilm")
        assert r.exit_code == 2 and "credentials" in r.output, r.output
    for root in (f"{REFUSED}/store", f"{NO_DRIVER}/store"):
        assert cli("encode", "a red car", "--storage-root", root).exit_code == 2
        assert cli("link", good, good, "--out", tmp_path / "m.parquet", "--storage-root", root).exit_code == 2
        assert cli("models", "list", "--storage-root", root).exit_code == 2
    assert not no_model  # every one failed before a model loaded


def test_a_write_to_a_credentialed_url_fails_without_its_password(tmp_path):
    from tests.conftest import tiny_model_dir

    (tmp_path / "model").mkdir()
    model = tiny_model_dir(tmp_path / "model", ["p", "l", "u", "m", "##l", "##u", "##m"])
    good = tmp_path / "good.csv"
    pacsv.write_csv(pa.table({"title": ["plum"]}), good)
    for out in (f"{REFUSED}/m.csv", f"{NO_DRIVER}/m.parquet"):  # refused by the door (issue 64), before any work
        r = cli("link", good, good, "--out", out, "--model", model, "--backend", "torch")
        assert r.exit_code == 2 and "credentials" in r.output, r.output
    for out in ("ftp://127.0.0.1:1/m.csv", "memory-nodriver://bucket/m.parquet"):  # without credentials: the write fails
        r = cli("link", good, good, "--out", out, "--model", model, "--backend", "torch")
        assert r.exit_code == 1 and "cannot write" in r.output and out in r.output, r.output


def test_redact_also_removes_the_userinfo_a_store_repeats_without_its_scheme():
    url = f"memory://alice:{SECRET}@host/x.csv"
    assert redact(f"cannot read {url}: /alice:{SECRET}@host/x.csv", url) == \
        "cannot read memory://***@host/x.csv: /***@host/x.csv"
    assert redact("s3://bucket/key@2 is fine", "s3://bucket/key@2") == "s3://bucket/key@2 is fine"
