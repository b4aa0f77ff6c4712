"""No secret travels in a URL (issue 64, section 3 and defect 1): the rule of `pearl_redact` (what
is userinfo, also when a password holds ``/``, spaces, ``@`` or percent escapes), its door for every
`pearl` argument and every flow parameter (the JSON schema a Prefect server enforces on a deployment
run, a flow called in this process, before Prefect stores the run), and the redactor behind it.
The reproductions first, then property-based tests of the rule, the redactor and the doors."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from pearl_cli.main import app
from pearl_redact import redact

SLASHED = "ftp://alice:pa/ssPW@127.0.0.1:1/left.csv"  # nothing listens on port 1: refused at once, offline
S3 = "s3://KEY:SECRET/with/slashes@bucket/x.csv"
SECRETS = ("pa/ssPW", "SECRET/with/slashes", "ssPW", "with/slashes")
ROOT = Path(__file__).resolve().parents[1]


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


@pytest.fixture
def table(tmp_path) -> Path:
    path = tmp_path / "right.csv"
    pacsv.write_csv(pa.table({"title": ["plum", "kiwi"]}), path)
    return path


# --- the reproductions (defect 1) -------------------------------------------------------------
@pytest.mark.parametrize("url", [SLASHED, S3, "ftp://alice:pa ssPW@127.0.0.1:1/left.csv",
                                 "s3://KEY:SECRET%2Fwith%2Fslashes@bucket/x.csv", "s3://KEY:ssPW/with@slashes@bucket/x"])
def test_a_password_holding_a_slash_a_space_an_at_or_an_escape_is_redacted(url):
    for text in (url, f"cannot read {url}: [Errno 111] Connection refused", {"storage_root": url}):
        assert not leaks(json.dumps(redact(text))), redact(text)
    bare = url.split("://", 1)[1]  # a store's own error may repeat the userinfo without its scheme, or decoded
    assert not leaks(redact(f"cannot read /{bare} ({unquote(bare)})", url))


def test_an_at_in_the_path_is_not_userinfo():
    for url in ("s3://bucket/k@v/x.csv", "http://127.0.0.1:9000/bucket/k@v", "http://[::1]:9000/k@v", "data/k@v.csv"):
        assert redact(url) == url and redact(f"wrote {url}", url) == f"wrote {url}"


@pytest.mark.parametrize("url", [SLASHED, S3])
def test_pearl_link_refuses_a_credentialed_input_in_one_line(url, table, tmp_path, no_model):
    """`pearl link 'ftp://alice:pa/ssPW@127.0.0.1:1/left.csv' r.csv --out m.csv` printed the URL whole."""
    for args in ([url, table, "--out", tmp_path / "m.csv"], [table, table, "--labels", url, "--out", tmp_path / "m.csv"],
                 [table, table, "--out", url], [table, "--dedupe", "--threshold", "0.9", "--out", tmp_path / "m.csv",
                                                "--storage-root", url]):
        r = CliRunner().invoke(app, ["link", *map(str, args)])
        assert r.exit_code == 2 and not leaks(r.output) and len(r.output.strip().splitlines()) == 1, r.output
        assert "credentials" in r.output and url not in r.output  # names the argument, not the URL
    assert not no_model and not (tmp_path / "m.csv").exists()  # before any work


def test_every_command_and_the_environment_refuse_a_credentialed_url(tmp_path, monkeypatch):
    for args in (["encode", "a red car", "--storage-root", S3], ["models", "list", "--storage-root", SLASHED],
                 ["encode", "a red car", "--model", S3], ["distill", S3, "--out", tmp_path / "d"],
                 ["encode", "--file", SLASHED], [f"--storage-root={S3}"]):
        r = CliRunner().invoke(app, list(map(str, args)))
        assert r.exit_code == 2 and not leaks(r.output) and "credentials" in r.output, (args, r.output)
    monkeypatch.setenv("PEARL_STORAGE_ROOT", S3)
    r = CliRunner().invoke(app, ["models", "list"])
    assert r.exit_code == 2 and "$PEARL_STORAGE_ROOT" in r.output and not leaks(r.output), r.output


def prefect_files() -> bytes:
    """Every byte of the harness's database (its file, journal and WAL)."""
    from prefect.settings import get_current_settings

    url = get_current_settings().server.database.connection_url.get_secret_value()
    db = Path(url.split("///", 1)[1])
    return b"".join(p.read_bytes() for p in db.parent.glob(f"{db.name}*"))


def test_a_flow_refuses_a_credentialed_parameter_before_prefect_stores_the_run(tmp_path, table, caplog):
    """The link flow called with a credentialed input or root: refused before the run is created, so the
    secret is in neither Prefect's database, nor a log, nor the storage root (its `storage_root` used to
    reach the flow's log, the database's log rows and a manifest). Each flow, one parameter kind each."""
    from prefect.testing.utilities import prefect_test_harness

    from flows.build_corpus import build_corpus
    from flows.evaluate import evaluate
    from flows.link import link
    from flows.retrain import retrain
    from flows.train import train

    caplog.set_level(logging.DEBUG)
    root = tmp_path / "store"
    calls = [lambda: link(left=SLASHED, right=str(table), storage_root=str(root), dask_workers=1),
             lambda: link(left=str(table), right=str(table), storage_root=S3, dask_workers=1),
             lambda: build_corpus(source=["sample", S3], storage_root=str(root), dask_workers=1),
             lambda: build_corpus(storage_root=str(root), read={"multistream_index": S3}, dask_workers=1),
             lambda: evaluate(models=[S3], storage_root=str(root), dask_workers=1),
             lambda: train(storage_root=str(root), backbone=SLASHED),
             lambda: retrain(storage_root=str(root), corpus={"parser_options": {"model": S3}})]
    with prefect_test_harness(server_startup_timeout=120):  # a busy machine starts it slowly
        for call in calls:
            with pytest.raises(ValueError) as e:
                call()
            assert not leaks(str(e.value)) and "credentials" in str(e.value), e.value
        stored = prefect_files()
    assert not [s for s in SECRETS if s.encode() in stored]
    assert not [r.getMessage() for r in caplog.records if leaks(r.getMessage())]
    assert not root.exists()


# --- the deployments' parameter schemas ----------------------------------------------------------
def deployed_flows() -> dict:
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    return {d["entrypoint"]: load_flow_from_entrypoint(str(ROOT / d["entrypoint"])) for d in spec["deployments"]}


def free_strings(schema, where: str = "$"):
    """(where, node) of every schema node that takes any string, or a list or dict of anything, without the rule."""
    if isinstance(schema, dict):
        kinds = schema.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if ("string" in kinds and not {"enum", "const", "pattern", "not"} & schema.keys()
                or "array" in kinds and schema.get("items") in (None, True, {})
                or "object" in kinds and "properties" not in schema and schema.get("additionalProperties") in (None, True, {})):
            yield where, schema
        for k, v in schema.items():
            if k != "not":
                yield from free_strings(v, f"{where}.{k}")
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            yield from free_strings(v, f"{where}[{i}]")


def test_every_free_string_of_a_deployed_flow_carries_the_rule_in_its_schema():
    """A new parameter (or a new field of a settings model) that takes a string, a free dict or a list
    cannot reach a deployment without the rule in the schema the server enforces."""
    from prefect.utilities.callables import parameter_schema

    for entrypoint, flow in deployed_flows().items():
        missing = [where for where, _ in free_strings(parameter_schema(flow).model_dump())]
        assert not missing, f"{entrypoint}: no userinfo rule at {missing}"


@given(url=st.sampled_from([SLASHED, S3, "memory://alice:s3cretPW@host/x"]),
       field=st.sampled_from(["storage_root", "source", "models", "left", "corpus", "training", "read"]))
def test_the_servers_schema_check_refuses_a_credentialed_parameter(url, field):
    """What the Prefect server runs on a deployment run's parameters (prefect.utilities.schema_tools):
    a credentialed string wherever a flow's schema takes one; the same parameters without it pass."""
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools.validation import ValidationError, validate

    value = {"source": [url], "models": ["minilm", url], "corpus": {"parser_options": {"model": url}},
             "training": {"device": url}, "read": {"multistream_index": url}}.get(field, url)
    clean = json.loads(json.dumps(value).replace(url, "s3://bucket/k@v/x.csv"))
    checked = 0
    for flow in FLOWS.values():
        schema = parameter_schema(flow).model_dump()
        if field not in schema["properties"]:
            continue
        checked += 1
        with pytest.raises(ValidationError, match=f"field '{field}"):
            validate({field: value}, schema, raise_on_error=True, ignore_required=True)
        assert validate({field: clean}, schema, ignore_required=True) == []
    assert checked


FLOWS = deployed_flows()


def test_the_schema_survives_the_prefect_clis_markup():
    """`prefect deployment run` prints the server's refusal, the schema quoted in it, as rich markup."""
    from rich.markup import render

    from pearl_redact import no_userinfo_schema

    assert render(repr(no_userinfo_schema(4))).plain == repr(no_userinfo_schema(4))


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_deployment_run_with_a_credentialed_parameter_is_refused_by_the_server(stack, tmp_path):
    """`prefect deployment run link/tables --param left=ftp://alice:pa/ssPW@...` on the e2e stack: the
    server's schema check refuses it (409) before it stores a run; afterwards the secret is in neither
    its database, nor any log of the stack, nor the storage root."""
    root = tmp_path / "store"
    for params in ({"left": SLASHED, "right": "s3://bucket/k@v/x.csv"}, {"left": "/no/left.csv", "labels": S3}):
        out = stack.cli("deployment", "run", "link/tables", "--param", f"storage_root={root}",
                        *[a for k, v in params.items() for a in ("--param", f"{k}={v}")],
                        "--flow-run-name", "e2e-credentials", check=False, timeout=120)
        assert out.returncode != 0 and "Validation failed for field" in out.stdout, out.stdout[-2000:]

    async def runs(client):
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

        return await client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=["e2e-credentials"])))

    assert stack.api(runs) == []
    home = Path(stack.env["PREFECT_HOME"])
    for where in (home, stack.logs):
        files = [p for p in where.rglob("*") if p.is_file()]
        assert files and not [str(p) for p in files if any(s.encode() in p.read_bytes() for s in SECRETS)]
    assert not root.exists()


# --- the rule, as properties ----------------------------------------------------------------------
SCHEMES = st.sampled_from(["s3", "s3a", "gcs", "gs", "abfs", "az", "ftp", "sftp", "https", "memory", "hdfs"])
WORD = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~", min_size=1, max_size=12)
# a password: any of the characters RFC 3986 would end the authority at, spaces, "@", ":" and escapes;
# it starts with a letter: a password whose part before its first "/" is all digits reads as a port (the
# rule's one ambiguity, pearl_redact's docstring)
# or an "@" before the first such character (read as rule 1: the docstring's other ambiguity)
def no_at_before_a_cut(password: str) -> bool:
    cuts = [i for i, c in enumerate(password) if c in "/?# "]
    return not cuts or "@" not in password[:cuts[0]]


PASSWORD = st.builds(lambda first, rest: first + rest, st.sampled_from("abcXYZ"),
                     st.text("abcXYZ0189/ @:?#%+=!$&", max_size=24)).filter(no_at_before_a_cut)
HOST = st.builds(lambda h, port: h + (f":{port}" if port is not None else ""),
                 st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True), st.none() | st.integers(1, 65535))
PATH = st.lists(st.text("abcxyz019@=+-._", min_size=1, max_size=8), max_size=4).map(lambda p: "".join("/" + s for s in p))


@st.composite
def credentialed(draw) -> tuple[str, str, str, str]:
    """(url, userinfo, what follows it, scheme): the userinfo as written, or percent-encoded."""
    scheme, user, password, host, path = draw(SCHEMES), draw(WORD), draw(PASSWORD), draw(HOST), draw(PATH)
    userinfo = f"{user}:{password}" if not draw(st.booleans()) else f"{quote(user)}:{quote(password, safe='')}"
    return f"{scheme}://{userinfo}@{host}{path}", userinfo, f"{host}{path}", scheme


@given(credentialed(), st.sampled_from(["cannot read {}: refused", "{}", "{} (at {})"]))
def test_the_redactor_hides_all_of_any_userinfo(case, template):
    url, userinfo, after, scheme = case
    out = redact(template.format(url, url), url)
    # everything from "scheme://" to somewhere at or after the userinfo's "@" is hidden
    for shown in out.split(f"{scheme}://***@")[1:]:
        tail = shown.split(" ")[0].rstrip(":)")
        assert after.endswith(tail) or tail == after, (url, out)
    assert userinfo not in out and unquote(userinfo) not in out
    # as a store repeats it: without its scheme, decoded
    bare = redact(f"no such file: /{unquote(userinfo)}@{after}", url)
    assert unquote(userinfo) not in bare, bare


@given(credentialed())
def test_the_door_refuses_any_userinfo_in_one_line_without_it(case):
    from pearl_redact import CredentialsInURL, has_userinfo, refuse_userinfo

    url, userinfo, _, _ = case
    assert has_userinfo(url)
    for value in (url, [url], {"a": {"b": (url,)}}):
        with pytest.raises(CredentialsInURL) as e:
            refuse_userinfo(value, "parameter 'x'")
        message = str(e.value)
        assert "\n" not in message and url not in message and userinfo not in message
        assert message.startswith("parameter 'x': ")


@given(SCHEMES, HOST, PATH.filter(lambda p: "@" in p))
def test_an_at_after_the_authority_without_userinfo_is_accepted_and_kept(scheme, host, path):
    from pearl_redact import has_userinfo, refuse_userinfo

    url = f"{scheme}://{host}{path}"
    assert not has_userinfo(url) and redact(url) == url and redact(f"wrote {url}.", url) == f"wrote {url}."
    refuse_userinfo(url, "x")  # accepted


@given(credentialed(), st.integers(0, 3))
def test_pearl_refuses_any_credentialed_argument_before_any_work(case, position):
    url, userinfo, _, _ = case
    args = ["link", "left.csv", "right.csv", "--out", "m.csv"]
    args.insert(1 + position, url) if position < 3 else args.extend(["--labels", url])
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "credentials" in r.output and userinfo not in r.output and url not in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
