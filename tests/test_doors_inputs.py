"""The doors for user input (issue 54 items 5 and 10): JSON-lines pages, XML dump pages and the
CSV / Parquet tables of `link`. The reproductions first, then property-based tests that drive each
door with generated bad input: every case ends in a one-line error or quarantine rows, with counts
that add up (in = kept + skipped + quarantined), and no file left behind."""
from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl_model.linking import sides
from pearl_model.linking.sides import LinkInputError
from storage.datasets import Dataset
from storage.schemas import RAW_PAGES
from tasks.raw_pages.sequential import write_raw_pages
from tasks.pages import find_duplicate_pages
from tasks.raw_pages.xml_dump import SYNTHETIC_ID_START, SourceError
from tests.conftest import FOOTER, HEADER, page_xml

BIG = 3_000_000  # a cell over two of pyarrow's 1 MiB CSV blocks


def _big_cell_csv(path: Path, before: int = 100_000) -> str:
    """A valid CSV whose one huge cell (in column ``blob``, not linked) comes after the first block."""
    rows = b"".join(b"n%d,y\n" % i for i in range(before))
    path.write_bytes(b"title,blob\n" + rows + b"huge," + b"x" * BIG + b"\nlast,z\n")
    return str(path)


# --- item 5: a cell over 1 MB --------------------------------------------------------------------------
def test_a_csv_with_a_cell_over_a_block_is_read_by_the_side_and_the_stream(tmp_path):
    url = _big_cell_csv(tmp_path / "big.csv")
    side = sides.read_side(url, "title")
    assert side.total == 100_002 and side.names[-2:] == ["huge", "last"]
    streamed = [n for chunk in sides.iter_column(url, "title", 7_000) for n in chunk.to_pylist()]
    assert streamed == side.names


def test_a_row_over_the_limit_is_one_line_naming_the_limit_and_how_to_raise_it(tmp_path):
    url = _big_cell_csv(tmp_path / "big.csv")
    for read in (lambda: sides.read_side(url, "title", max_row_bytes=1 << 20),
                 lambda: list(sides.iter_column(url, "title", 100, max_row_bytes=1 << 20))):
        with pytest.raises(LinkInputError) as e:
            read()
        message = str(e.value)
        assert "\n" not in message and "max_row_bytes=1048576" in message and "--max-row-bytes" in message


def test_the_link_cli_and_flow_take_the_row_limit(tmp_path, no_model):
    import inspect

    from typer.testing import CliRunner

    from flows.link import link as link_flow
    from pearl_cli.main import app

    assert "max_row_bytes" in inspect.signature(link_flow.fn).parameters
    url = _big_cell_csv(tmp_path / "big.csv")
    out = tmp_path / "m.csv"
    r = CliRunner().invoke(app, ["link", url, url, "--out", str(out), "--max-row-bytes", "1000000"])
    assert r.exit_code != 0 and not no_model
    assert r.output.strip().count("\n") == 0 and "max_row_bytes=1000000" in r.output
    r = CliRunner().invoke(app, ["link", url, url, "--out", str(out)])
    assert "straddl" not in r.output and no_model  # read whole, up to the model (stubbed here)
    assert sorted(os.listdir(tmp_path)) == ["big.csv"]


def test_the_flow_s_split_reads_a_big_cell_and_honours_the_limit(tmp_path):
    pytest.importorskip("torch")
    from tasks import matches as stage
    from tests.conftest import tiny_model_dir

    (tmp_path / "model").mkdir()
    model = tiny_model_dir(tmp_path / "model", list("abcdefghijklmnopqrstuvwxyz"))
    url = _big_cell_csv(tmp_path / "big.csv")
    plan = stage.plan_link(url, url, str(tmp_path / "store"), model=str(model), partition_rows=50_000)
    stage.start_work(plan)
    parts = stage.split_side(plan, "left")
    assert (parts.rows, parts.skipped, parts.parts) == (100_002, 0, 3)
    plan = stage.plan_link(url, url, str(tmp_path / "store"), model=str(model), max_row_bytes=1 << 20)
    with pytest.raises(LinkInputError, match="max_row_bytes=1048576"):
        stage.split_side(plan, "left")


# --- item 10: one id rule, a linked column named twice, NUL bytes --------------------------------------
def _pages(tmp_path, data: bytes, name: str = "p.jsonl", **kw) -> tuple[dict, list[dict]]:
    src = tmp_path / name
    src.write_bytes(data)
    out = Dataset(str(tmp_path / "store" / name), "raw_pages", "v1", RAW_PAGES)
    stats = write_raw_pages(str(src), out, **kw)
    out.commit(code_version="t", params={}, inputs={}, stats=stats)
    return stats, out.read().to_pylist()


@pytest.mark.parametrize("page_id, expected", [("7", 7), (7, 7), ("\u0663", None), ("\u00b2", None),
                                               ("\uff17", None), ("\u0967", None)])
def test_a_page_id_is_ascii_digits_or_refused(tmp_path, page_id, expected):
    line = json.dumps({"id": page_id, "title": "T", "text": "Some text."}).encode() + b"\n"
    _, [row] = _pages(tmp_path, line)
    if expected is None:  # "٣" was read as 3 while "²" was refused
        assert row["error"] == "malformed_record" and row["page_id"] is None and "ASCII" in row["error_detail"]
    else:
        assert row["error"] is None and row["page_id"] == expected


# --- issue 64 item 9: an id that is not one is quarantined, a missing id cannot take a real one --------
@pytest.mark.parametrize("given", ["bad id", " 12", "-12", "", "1 2", True, False, 1.0, -12, [1], {"n": 1}])
def test_a_malformed_id_is_quarantined_and_never_takes_a_real_pages_id(tmp_path, given):
    """It was given the id seq + 1 (true: 1), the real page 1 was then quarantined as its duplicate."""
    lines = [{"id": given, "title": "Odd", "text": "Odd text."}, {"id": 1, "title": "Real", "text": "Real text."}]
    stats, rows = _pages(tmp_path, b"".join(json.dumps(r).encode() + b"\n" for r in lines))
    odd, real = rows
    assert odd["error"] in ("malformed_record", "page_id_out_of_range") and odd["page_id"] is None
    assert odd["error_detail"].startswith("line 1: 'id'") and odd["raw"] == json.dumps(lines[0]).encode() + b"\n"
    assert (real["error"], real["page_id"]) == (None, 1)
    assert stats["pages_read"] == 2 and stats["unreadable_by_reason"] == {odd["error"]: 1}
    assert [x.tolist() for x in find_duplicate_pages(_committed(tmp_path))] == [[]]


def _committed(tmp_path) -> Dataset:
    return Dataset(str(tmp_path / "store" / "p.jsonl"), "raw_pages", "v1", RAW_PAGES)


@pytest.mark.parametrize("real_id", [1, 2, 3, SYNTHETIC_ID_START - 1])
def test_records_without_an_id_never_collide_with_a_given_one(tmp_path, real_id):
    lines = [{"title": "A", "text": "A."}, {"id": None, "title": "B", "text": "B."},
             {"id": real_id, "title": "Real", "text": "Real."}, {"title": "C", "text": "C."}]
    _, rows = _pages(tmp_path, b"".join(json.dumps(r).encode() + b"\n" for r in lines))
    assert [r["error"] for r in rows] == [None] * 4
    ids = [r["page_id"] for r in rows]
    assert ids[2] == real_id and len(set(ids)) == 4
    assert all(i >= SYNTHETIC_ID_START for i in ids[:2] + ids[3:])
    assert [x.tolist() for x in find_duplicate_pages(_committed(tmp_path))] == [[]]


@pytest.mark.parametrize("given", [SYNTHETIC_ID_START, str(SYNTHETIC_ID_START + 1), 2**63 - 1])
def test_a_given_id_in_the_block_kept_for_records_without_one_is_quarantined(tmp_path, given):
    _, [row] = _pages(tmp_path, json.dumps({"id": given, "title": "T", "text": "x."}).encode() + b"\n")
    assert row["error"] == "page_id_out_of_range" and str(SYNTHETIC_ID_START) in row["error_detail"]


@pytest.mark.parametrize("pid", [-3, SYNTHETIC_ID_START + 2])
def test_an_xml_page_id_outside_the_range_is_quarantined_too(tmp_path, pid):
    """A dump read beside JSON lines shares their ids: its ids obey the same range."""
    dump = HEADER + page_xml(pid, "Odd", "Odd text.") + page_xml(2, "Real", "Real text.") + FOOTER
    stats, rows = _pages(tmp_path, dump, name="d.xml")
    assert [(r["error"], r["page_id"]) for r in rows] == [("page_id_out_of_range", None), (None, 2)]
    assert stats["unreadable_by_reason"] == {"page_id_out_of_range": 1}


def test_json_nesting_over_the_limit_is_quarantined_as_too_deep(tmp_path):
    deep = {"title": "Deep", "text": "x.", "meta": json.loads("[" * 30 + "]" * 30)}
    shallow = {"title": "Flat", "text": "y.", "meta": [[1]]}
    data = b"".join(json.dumps(r).encode() + b"\n" for r in (deep, shallow))
    stats, rows = _pages(tmp_path, data, max_json_depth=10)
    assert [r["error"] for r in rows] == ["too_deep", None]
    assert "max_json_depth=10" in rows[0]["error_detail"] and rows[0]["raw"]
    assert stats["unreadable_by_reason"] == {"too_deep": 1}
    _, rows = _pages(tmp_path, data, name="q.jsonl", max_json_depth=40)
    assert [r["error"] for r in rows] == [None, None]


def test_json_page_limits_are_read_settings():
    from flows.corpus_config import ReadConfig

    params = ReadConfig(max_json_depth=12).params()
    assert params["max_json_depth"] == 12 and params["max_page_bytes"] == 4 << 20


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_linked_column_named_twice_is_refused(tmp_path, suffix):
    url = str(tmp_path / f"t{suffix}")
    if suffix == ".csv":
        Path(url).write_text("title,id,title\na,1,b\n", encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_arrays([pa.array(["a"]), pa.array([1]), pa.array(["b"])],
                                            names=["title", "id", "title"]), url)
    with pytest.raises(LinkInputError) as e:
        sides.read_side(url, "title")
    assert "\n" not in str(e.value) and "'title' 2 times" in str(e.value)
    with pytest.raises(LinkInputError, match="2 times"):
        list(sides.iter_column(url, "title", 10))
    assert sides.read_side(url, "id").names == ["1"]  # a column named once is read as before


def test_nul_bytes_are_stripped_from_names_and_counted(tmp_path):
    url = tmp_path / "t.csv"
    url.write_bytes(b'title\nab\x00c\n\x00\nplain\n""\n')
    side = sides.read_side(str(url), "title")
    assert side.names == ["abc", "plain"]
    assert (side.total, side.skipped, side.nul_stripped) == (4, 2, 2)
    assert side.counts() == {"total": 4, "kept": 2, "skipped": 2, "nul_stripped": 2}


# --- properties: JSON lines ----------------------------------------------------------------------------
def _digits(alphabet: str) -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=1, max_size=4)


ODD_IDS = st.one_of(
    st.none(), st.integers(-(2**64), 2**64), _digits("0123456789"), _digits("\u0660\u0661\u0663\u00b2\u00b9\u0967\uff10"),
    st.booleans(), st.floats(allow_nan=False), st.text(max_size=5), st.lists(st.integers(), max_size=2))
VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                      max_leaves=10)


@st.composite
def jsonl_line(draw) -> bytes:
    kind = draw(st.sampled_from(["record", "record", "wrong_types", "bad_utf8", "huge", "deep", "blank", "junk"]))
    if kind == "record":
        record = {"title": draw(st.text(max_size=15)), "text": draw(st.text(max_size=40))}
        if draw(st.booleans()):
            record["id"] = draw(ODD_IDS)
        return json.dumps(record, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    if kind == "wrong_types":
        return json.dumps({"title": draw(VALUES), "text": draw(VALUES), "id": draw(VALUES)}).encode()
    if kind == "bad_utf8":
        return b'{"title": "' + draw(st.binary(min_size=1, max_size=6)).replace(b"\n", b"") + b'\xff", "text": "t"}'
    if kind == "huge":
        return json.dumps({"title": "Huge", "text": "x" * draw(st.integers(300, 3000))}).encode()
    if kind == "deep":
        n = draw(st.integers(1, 40))
        return b'{"title": "D", "text": "t", "m": ' + b"[" * n + b"]" * n + b"}"
    if kind == "blank":
        return draw(st.sampled_from([b"", b"  ", b"\t"]))
    return draw(st.binary(max_size=30)).replace(b"\n", b"")


def _no_temp_files(*dirs: str) -> None:
    left = [os.path.join(b, f) for d in dirs for b, _, fs in os.walk(d) for f in fs
            if ".tmp" in f or f.startswith(".") or "staging" in b]
    assert not left, left


@given(lines=st.lists(jsonl_line(), max_size=12), newline=st.sampled_from([b"\n", b"\r\n"]))
def test_generated_json_lines_end_in_kept_or_quarantined_rows_that_add_up(lines, newline):
    with tempfile.TemporaryDirectory() as tmp:
        data = newline.join(lines) + newline
        src = Path(tmp, "in", "p.jsonl")
        src.parent.mkdir()
        src.write_bytes(data)
        out = Dataset(str(Path(tmp, "store")), "raw_pages", "v1", RAW_PAGES)
        records = [line for line in data.split(b"\n") if line.strip()]  # a lone CR ends no line
        try:
            stats = write_raw_pages(str(src), out, pages_per_part=5, max_page_bytes=1000, max_json_depth=20)
        except SourceError as e:  # checked before any work: an input without a record, or not JSON lines
            assert "\n" not in str(e) and str(src) in str(e)
            assert not records or not records[0].lstrip().startswith(b"{")
            assert not [f for _, _, fs in os.walk(Path(tmp, "store")) for f in fs]
            return
        out.commit(code_version="t", params={}, inputs={}, stats=stats)
        rows = out.read().to_pylist() if stats["pages_read"] else []
        quarantined = [r for r in rows if r["error"]]
        assert stats["pages_read"] == len(rows) == len(records)  # in = kept + quarantined
        assert sum(stats["unreadable_by_reason"].values()) == len(quarantined)
        for r in rows:
            if r["error"]:
                assert r["text"] is None and r["raw"] and r["error_detail"].startswith("line ")
            else:
                assert isinstance(r["page_id"], int) and r["text"].strip()
        for line, r in zip(records, rows):
            try:
                given_id = json.loads(line).get("id")
            except (ValueError, AttributeError, RecursionError):
                continue
            if isinstance(given_id, str) and given_id and not given_id.isascii() and given_id.isdigit():
                assert r["error"], (given_id, r)  # digits of another script are never a page id
            if isinstance(given_id, str) and given_id.isascii() and given_id.isdigit() and not r["error"]:
                assert r["page_id"] == int(given_id)
            if not r["error"]:  # a given id is kept as it is, a missing one comes from the reserved block
                assert (r["page_id"] >= SYNTHETIC_ID_START) == (given_id is None), (given_id, r)
                if given_id is not None:
                    assert not isinstance(given_id, bool) and r["page_id"] == int(given_id)
        assert src.read_bytes() == data and os.listdir(src.parent) == ["p.jsonl"]
        _no_temp_files(str(Path(tmp, "store")))


GIVEN_IDS = st.one_of(st.integers(0, 30), st.integers(0, 30).map(str), ODD_IDS)


@given(ids=st.lists(st.one_of(st.just("absent"), GIVEN_IDS), max_size=10), sources=st.integers(1, 3))
def test_generated_ids_are_kept_quarantined_or_made_up_without_colliding(ids, sources):
    """The id door over one or several JSON-lines sources: in = kept + quarantined, a kept record's
    id is its own or (none given) one no given id can be, so a duplicate is only a repeated given id."""
    with tempfile.TemporaryDirectory() as tmp:
        records = [{"title": f"T{n}", "text": f"Text {n}."} | ({} if i == "absent" else {"id": i})
                   for n, i in enumerate(ids)]
        paths = []
        for k in range(sources):  # the records dealt round the sources, read in order
            paths.append(Path(tmp, f"s{k}.jsonl"))
            paths[-1].write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records[k::sources]) or b"{}\n")
        out = Dataset(str(Path(tmp, "store")), "raw_pages", "v1", RAW_PAGES)
        stats = write_raw_pages([str(p) for p in paths], out, pages_per_part=4)
        out.commit(code_version="t", params={}, inputs={}, stats=stats)
        rows = out.read().to_pylist()
        read = [r for k in range(sources) for r in records[k::sources] or [{}]]
        assert stats["pages_read"] == len(rows) == len(read)
        assert sum(stats["unreadable_by_reason"].values()) == sum(1 for r in rows if r["error"])
        given = {}
        for record, row in zip(read, rows):
            if row["error"] or "title" not in record:
                continue
            i = record.get("id")
            if i is None:
                assert SYNTHETIC_ID_START <= row["page_id"] == SYNTHETIC_ID_START + row["seq"]
            else:
                assert type(i) in (int, str) and int(i) == row["page_id"] and 0 <= row["page_id"] < SYNTHETIC_ID_START
                given.setdefault(row["page_id"], []).append(row["seq"])
        dups = sorted(int(seq) for part in find_duplicate_pages(out) for seq in part[:, 0])
        assert dups == sorted(seq for seqs in given.values() for seq in seqs[1:])


# --- properties: XML dump pages ------------------------------------------------------------------------
@st.composite
def xml_page(draw) -> bytes:
    kind = draw(st.sampled_from(["page", "page", "redirect", "truncated", "empty", "giant", "latin1", "junk"]))
    title = draw(st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12))
    text = draw(st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
    pid = draw(st.integers(1, 10**6))
    if kind == "page":
        return page_xml(pid, title, text)
    if kind == "redirect":
        return page_xml(pid, title, f"#REDIRECT [[{title}]]", redirect=title)
    if kind == "truncated":
        whole = page_xml(pid, title, text)
        return whole[: draw(st.integers(1, len(whole) - 1))]
    if kind == "empty":
        return draw(st.sampled_from([b"  <page>\n  </page>\n", b"  <page></page>\n", b"  <page/>\n"]))
    if kind == "giant":
        return page_xml(pid, title, "y" * draw(st.integers(1500, 4000)))
    if kind == "latin1":
        return page_xml(pid, "Caf", "caf").replace(b"<title>Caf", b"<title>Caf\xe9")
    return draw(st.binary(max_size=20))


@given(pages=st.lists(xml_page(), max_size=8), footer=st.booleans())
def test_generated_xml_pages_end_in_one_line_or_rows_that_add_up(pages, footer):
    with tempfile.TemporaryDirectory() as tmp:
        data = HEADER + b"".join(pages) + (FOOTER if footer else b"")
        src = Path(tmp, "in", "d.xml")
        src.parent.mkdir()
        src.write_bytes(data)
        out = Dataset(str(Path(tmp, "store")), "raw_pages", "v1", RAW_PAGES)
        try:
            stats = write_raw_pages(str(src), out, pages_per_part=3, max_page_bytes=1000)
        except SourceError as e:  # e.g. a dump that holds no <page>
            assert "\n" not in str(e) and str(src) in str(e)
            assert not [f for _, _, fs in os.walk(Path(tmp, "store")) for f in fs]
        else:
            out.commit(code_version="t", params={}, inputs={}, stats=stats)
            rows = out.read().to_pylist() if stats["pages_read"] else []
            quarantined = [r for r in rows if r["error"]]
            assert stats["pages_read"] == len(rows)
            assert sum(stats["unreadable_by_reason"].values()) == len(quarantined)
            assert all(r["raw"] is not None and r["text"] is None for r in quarantined)
            assert all(r["title"] and r["text"] is not None for r in rows if not r["error"])
        assert src.read_bytes() == data and os.listdir(src.parent) == ["d.xml"]
        _no_temp_files(str(Path(tmp, "store")))


# --- properties: the tables of link --------------------------------------------------------------------
HEADERS = st.one_of(st.sampled_from(["title", "title", "name", "", "=cmd|'/c calc'!A1", "+x", "-1", "@sum",
                                     "ti\x00tle", " title", "a,b", 'q"uote']),
                    st.text(max_size=6))
CELLS = st.one_of(st.none(), st.text(max_size=12), st.sampled_from(["", "  ", "=HYPERLINK(\"x\")", "+1", "@a",
                                                                       "a\x00b", "\x00", "caf\u00e9"]),
                  st.integers(-5, 5).map(str))


@st.composite
def link_table(draw) -> tuple[list[str], list[list[str | None]]]:
    header = draw(st.lists(HEADERS, min_size=1, max_size=4))
    rows = draw(st.lists(st.lists(CELLS, min_size=len(header), max_size=len(header)), max_size=8))
    if rows and draw(st.integers(0, 9)) == 0:  # now and then one huge cell
        rows[draw(st.integers(0, len(rows) - 1))][draw(st.integers(0, len(header) - 1))] = "h" * 5000
    return header, rows


def _expected(header, rows, column):
    at = header.index(column)
    values = [r[at] for r in rows]
    clean = [None if v is None else v.replace("\x00", "") for v in values]
    kept = [v for v in clean if v is not None and v.strip()]
    return kept, sum(v is not None and "\x00" in v for v in values)


def _check_outcome(read, header, rows, column, kind):
    n_named = header.count(column)
    try:
        side = read()
    except LinkInputError as e:
        message = str(e)
        assert "\n" not in message
        if "\x00" in column:
            assert "NUL" in message
        elif n_named == 0:
            assert "has no column" in message
        elif n_named > 1:
            assert f"{column!r} {n_named} times" in message
        else:  # a single named column fails only on an empty table or a row over the limit
            assert "no rows" in message or "null or empty" in message or "max_row_bytes" in message \
                or (kind == "csv" and ("cannot read" in message)), message
        return
    assert n_named == 1 and "\x00" not in column
    kept, with_nul = _expected(header, rows, column)
    assert side.names == kept
    assert side.total == len(rows) == len(side.names) + side.skipped
    assert all("\x00" not in n for n in side.names)
    counts = side.counts()
    assert counts["total"] == counts["kept"] + counts["skipped"] and counts["nul_stripped"] <= with_nul


@given(table=link_table(), pick=st.integers(0, 3), kind=st.sampled_from(["csv", "parquet"]))
def test_generated_link_tables_end_in_a_side_or_one_line(table, pick, kind):
    header, rows = table
    column = header[pick % len(header)]
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp, f"t.{kind}"))
        if kind == "csv":
            buf = io.StringIO()
            csv.writer(buf).writerows([header, *rows])  # CRLF rows: a bare CR in a cell is quoted
            Path(url).write_bytes(buf.getvalue().encode("utf-8", "surrogatepass"))
        else:
            arrays = [pa.array([r[i] for r in rows], pa.string()) for i in range(len(header))]
            pq.write_table(pa.Table.from_arrays(arrays, names=header), url)
        before = Path(url).read_bytes()
        _check_outcome(lambda: sides.read_side(url, column, max_row_bytes=4096), header, rows, column, kind)
        _check_outcome(lambda: sides.concat_sides([sides.side_from_array(c, url, column) for c in
                                                   sides.iter_column(url, column, 3, max_row_bytes=4096)]),
                       header, rows, column, kind)
        assert Path(url).read_bytes() == before and os.listdir(tmp) == [f"t.{kind}"]


@given(values=st.lists(st.one_of(st.none(), st.integers(-3, 3)), min_size=1, max_size=6),
       kind=st.sampled_from(["int", "float", "bool", "binary"]))
def test_non_text_parquet_columns_are_read_as_text_or_refused_in_one_line(values, kind):
    cast = {"int": (int, pa.int64()), "float": (float, pa.float64()), "bool": (bool, pa.bool_()),
            "binary": (lambda v: b"\xff" * abs(v), pa.binary())}[kind]
    column = pa.array([None if v is None else cast[0](v) for v in values], cast[1])
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp, "t.parquet"))
        pq.write_table(pa.table({"title": column}), url)
        try:
            side = sides.read_side(url, "title")
        except LinkInputError as e:
            assert "\n" not in str(e)
        else:
            assert side.total == len(values) == len(side.names) + side.skipped
