"""`pearl benchmarks check`: it fetches nothing, names the exact path each missing benchmark file
goes to, passes on the authors' complete layout, and lists every file the loaders read."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pearl_cli.main import app
from pearl_model.evaluation import data

# The authors' eval_data/ layout, typed here apart from BENCHMARK_FILES (../shared/benchmarks/pearl/README.md).
LAYOUT = ["ppdb/ppdb.json", "ppdb/ppdb_filtered.json", "turney/turney.txt", "bird/bird.txt",
          "yago/yago_test_samples.txt", "umls/umls_test_samples.txt", "conll2003/test.json", "conll2003/dev.json",
          "bc5cdr/test.json", "bc5cdr/dev.json", "autofj/autofj.md"]


def layout(root, files):
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")
    return root


def check(*args, env=None):
    return CliRunner().invoke(app, ["benchmarks", "check", *args], env=env)


def test_each_missing_file_is_named_by_the_exact_path_it_goes_to(tmp_path):
    present = ["ppdb/ppdb.json", "turney/turney.txt", "conll2003/test.json"]
    root = layout(tmp_path / "eval_data", present)
    result = check(str(root))
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    missing = [str(root.resolve() / rel) for rel in LAYOUT if rel not in present]
    assert sorted(lines[-len(missing):]) == sorted(f"  {path}" for path in missing)
    assert "8 of 11 files missing" in result.output and "github.com/tigerchen52/PEARL" in result.output
    assert f"benchmark directory: {root.resolve()}, from the argument" in lines[0]
    for rel in present:
        assert any(line.split()[:2] == ["ok", rel] for line in lines), rel
    assert not any(str(root.resolve() / rel) in result.output for rel in present)


def test_the_authors_complete_layout_passes(tmp_path):
    root = layout(tmp_path, LAYOUT)
    result = check(str(root))
    assert result.exit_code == 0, result.output
    assert "missing" not in result.output and result.output.endswith("every benchmark file is in place\n")


def test_without_the_autofj_package_it_says_how_to_install_it(tmp_path, monkeypatch):
    def not_installed():
        raise data.DatasetMissing(f"not installed: {data.AUTOFJ_PIP}")

    monkeypatch.setattr(data, "autofj_package_dir", not_installed)
    result = check(str(layout(tmp_path, LAYOUT)))
    assert result.exit_code == 1
    assert f"AutoFJ tables (the autofj package): missing: not installed: {data.AUTOFJ_PIP}" in result.output
    assert "files missing" not in result.output


def test_without_an_argument_it_checks_pearl_benchmarks_and_creates_nothing(tmp_path):
    target = (tmp_path / "not-yet").resolve()
    result = check(env={"PEARL_BENCHMARKS": str(target)})
    assert result.exit_code == 1
    assert f"benchmark directory: {target} (not there yet), from $PEARL_BENCHMARKS" in result.output
    assert f"  {target / 'bird' / 'bird.txt'}" in result.output.splitlines()
    assert not target.exists()


@pytest.mark.parametrize("load", [
    lambda d: data.load_ppdb(d), lambda d: data.load_ppdb(d, filtered=True), data.load_turney, data.load_bird,
    lambda d: data.load_retrieval(d, "yago"), lambda d: data.load_retrieval(d, "umls"),
    lambda d: data.load_entities(d, "conll2003"), lambda d: data.load_entities(d, "conll2003", "dev"),
    lambda d: data.load_entities(d, "bc5cdr"), lambda d: data.load_entities(d, "bc5cdr", "dev"),
])
def test_every_file_a_loader_reads_is_one_the_check_lists(tmp_path, load):
    with pytest.raises(data.DatasetMissing) as missing:
        load(tmp_path)
    assert str(missing.value).removeprefix("benchmark file not found: ") in data.missing_files(tmp_path)
