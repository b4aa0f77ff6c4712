"""benchmarks/stage_rates.py: it runs what corpus_stages runs, with the flow's parameters, on
replicated inputs whose copies are distinct pages, and projects with the stated arithmetic."""
from __future__ import annotations

import importlib.util
import inspect
from types import SimpleNamespace
import json
import re
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "stage_rates", Path(__file__).resolve().parents[1] / "benchmarks" / "stage_rates.py")
sr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sr)

# raw_pages_stage's parallel path for a multistream dump: replicated inputs are plain dumps
MULTISTREAM_ONLY = {"plan_multistream_task", "raw_partition_task", "commit_multistream_task"}


class Wired(Exception):
    pass


def _wired_tasks() -> set[str]:
    """The tasks corpus_wiring runs through its steps: in it, or in the stage functions it calls."""
    import flows.build_corpus as bc

    source = inspect.getsource(bc.corpus_wiring)
    found = set(re.findall(r"steps\.(?:call|submit|map)\((\w+)", source))
    for stage in set(re.findall(r"\b(\w+_stage)\(", source)):
        found |= set(re.findall(r"steps\.(?:call|submit|map)\((\w+)", inspect.getsource(getattr(bc, stage))))
    return found - MULTISTREAM_ONLY


def test_the_benchmark_and_the_flow_run_one_wiring(monkeypatch, tmp_path):
    """corpus_stages (the flow) and run_once (the benchmark) both hand their arguments to
    corpus_wiring, with Prefect's steps and the measured ones: a benchmark that ran its own
    copy of the stages would not get here."""
    import flows.build_corpus as bc
    from runs.progress import LoggedSteps

    seen, signature = [], inspect.signature(bc.corpus_wiring)

    def wiring(*args, **kwargs):
        bound = signature.bind(*args, **kwargs).arguments
        seen.append((bound.pop("steps"), bound))
        raise Wired

    args = sr.wiring_args("sample", str(tmp_path / "store"), 1, {"phrase_buckets": 3})
    monkeypatch.setattr(bc, "corpus_wiring", wiring)
    with pytest.raises(Wired):
        bc.corpus_stages.fn(**args)
    with pytest.raises(Wired):
        sr.run_once(["sample"], 1, str(tmp_path / "store"), {"phrase_buckets": 3}, 0.05)
    (flow_steps, flow_args), (bench_steps, bench_args) = seen
    # the flow's Prefect steps log each stage (runs.progress); the benchmark's time each step
    assert type(flow_steps) is LoggedSteps and isinstance(bench_steps, sr.MeasuredSteps)
    assert flow_args == bench_args == args


def test_parameters_are_the_ones_build_corpus_gives_its_stages(monkeypatch):
    import flows.build_corpus as bc

    given, names = {}, list(inspect.signature(bc.corpus_stages.fn).parameters)

    class Recorder:
        def with_options(self, **_):
            return self

        def __call__(self, *args, return_state=False):
            given.update(zip(names, args))
            return SimpleNamespace(result=lambda: {"reuse_stores": {}}, state_details=SimpleNamespace(flow_run_id="r"))

    args = sr.wiring_args("sample", "/tmp/root", 3, {"phrase_buckets": 5, "pages_per_partition": 7})
    monkeypatch.setattr(bc, "corpus_stages", Recorder())
    monkeypatch.setattr(bc, "corpus_summary_task", lambda *a: None)  # the parent run's artifacts: no run here
    monkeypatch.setattr(bc, "reuse_report_task", lambda *a: {"dump_order": None})
    bc.build_corpus.fn(source="sample", storage_root="/tmp/root", dask_workers=3,
                       phrases=bc.PhrasesConfig(phrase_buckets=5), read=bc.ReadConfig(pages_per_partition=7))
    assert args == given
    p = sr.recorded_params(args)
    assert p["pages_per_partition"] == 7 and p["phrase_params"]["phrase_buckets"] == 5
    assert p["alias_buckets"] is None and p["positive_params"]["negatives"]["block_buckets"] is None  # sized in the run
    assert p["positive_params"]["fasttext"]["workers"] == 1  # build_corpus's default
    with pytest.raises(TypeError):
        sr.wiring_args("sample", "/tmp/root", 3, {"no_such_setting": 1})


def test_map_items_are_the_calls_prefect_maps_to():
    from prefect import unmapped

    assert sr.map_items((unmapped("d"), range(3), ["a", "b", "c"], unmapped([1]), None)) == [
        ("d", 0, "a", [1], None), ("d", 1, "b", [1], None), ("d", 2, "c", [1], None)]
    with pytest.raises(ValueError):
        sr.map_items((range(2), range(3)))


def _raw_rows(paths, root):
    from storage.datasets import Dataset
    from storage.schemas import RAW_PAGES
    from tasks.raw_pages.sequential import write_raw_pages

    raw = Dataset(root, "raw_pages", "t", RAW_PAGES)
    stats = write_raw_pages(paths if len(paths) > 1 else paths[0], raw, pages_per_part=50)
    raw.commit(code_version="t", params={}, inputs={})
    return stats, raw.read(columns=["page_id", "title", "redirect_target", "text", "error"]).to_pylist()


def test_replicated_sample_pages_are_distinct_pages_with_the_same_text(tmp_path):
    made = sr.replicate_inputs(["sample"], 6, 3, tmp_path / "in")
    assert made["paths"][0].endswith(".xml.bz2") and made["pages"][0]["pages_written"] == 18
    stats, rows = _raw_rows(made["paths"], str(tmp_path / "store"))
    assert stats["input_complete"] and not stats["unreadable_by_reason"]
    assert len(rows) == 18 and len({r["page_id"] for r in rows}) == 18 and len({r["title"] for r in rows}) == 18
    first, third = rows[:6], rows[12:]
    assert [r["text"] for r in first] == [r["text"] for r in third]
    assert [r["page_id"] + 2 * made["id_offset"] for r in first] == [r["page_id"] for r in third]
    redirects = [(a, b) for a, b in zip(first, third) if a["redirect_target"]]
    assert redirects and all(b["redirect_target"] == sr.copy_title(a["redirect_target"], 2) for a, b in redirects)


def test_replicated_json_lines_keep_ids_distinct(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": 7, "title": "Seven", "text": "Seven is a number."}) + "\n"
                   + json.dumps({"title": "Mercury (disambiguation)", "text": "Mercury may be a planet."}) + "\n")
    made = sr.replicate_inputs([str(src)], None, 2, tmp_path / "out")
    _, rows = _raw_rows(made["paths"], str(tmp_path / "store"))
    assert [r["title"] for r in rows] == ["Seven", "Mercury (disambiguation)", "Seven (copy 1)",
                                          "Mercury (copy 1) (disambiguation)"]
    assert len({r["page_id"] for r in rows}) == 4 and rows[2]["page_id"] == 7 + made["id_offset"]


def test_copy_titles_keep_what_page_kind_reads():
    from tasks.pages.wikitext import page_kind

    assert page_kind(sr.copy_title("Mercury (disambiguation)", 3)) == "disambiguation"
    assert page_kind(sr.copy_title("List of moons", 3)) == "list"
    assert sr.copy_title("Anarchism", 0) == "Anarchism"


def _step(task, kind, wall, cores, rule=None, threads=1):
    return {"step": task, "task": task, "kind": kind, "wall_s": wall, "cores": cores, "cpu_s": wall * cores / 2,
            "tasks_rule": rule, "tasks": 8, "threads": threads}


def _run(workers, replicate, sentences, phrases, mine_s, reduce_s, commit_s):
    counts = {"pages": 10 * replicate, "sentences": sentences, "phrases": phrases, "corpus_words": 10 * sentences,
              "fasttext_sentences": sentences, "word_vectors_scan_s_per_sentence": 0.0}
    stages = [
        {"stage": "phrase_occurrences", "unit": "sentences", "units": sentences, "wall_s": mine_s + commit_s,
         "units_per_s_per_core": 1.0, "output_bytes": 10 * sentences, "peak_rss_mb_per_worker": [100.0],
         "steps": [_step("mine_chunk_task", "map", mine_s, workers, "chunks"),
                   _step("commit_occurrences_task", "flow", commit_s, 1)]},
        {"stage": "augmentations", "unit": "phrases", "units": phrases, "wall_s": reduce_s,
         "units_per_s_per_core": 1.0, "output_bytes": 100 + 2 * phrases, "peak_rss_mb_per_worker": [100.0],
         "steps": [_step("augment_part_task", "map", reduce_s, workers, "phrase_buckets")]},
    ]
    params = {"pages_per_partition": 10, "alias_buckets": 8,
              "phrase_params": {"sentences_per_chunk": 100, "phrase_buckets": 8},
              "positive_params": {"fasttext": {"max_sentences": None, "epochs": 5, "workers": 1},
                                  "negatives": {"block_buckets": 8}}}
    return {"workers": workers, "replicate": replicate, "counts": counts, "stages": stages, "params": params}


def test_projection_scales_by_the_driver_over_the_cores_a_step_can_use():
    # 1 worker: mining 100 s for 1,000 sentences (+1 s commit), 2,000 sentences 200 s (+1 s);
    # augmentations 10 s for 500 phrases, 18 s for 900 phrases.
    results = {"runs": [_run(1, 1, 1000, 500, 100.0, 10.0, 1.0), _run(1, 2, 2000, 900, 200.0, 18.0, 1.0)]}
    proj = sr.project_stages(results, cores=64, enwiki={"sentences": 1e6, "pages": 1e4}, basis="wall")
    mining, aug = proj["stages"]
    # rate: 0.1 core-s per sentence (map, 64 of 1e4 chunks) + 0.0005 s (commit, 1 core)
    assert mining["hours_rate"] == pytest.approx((1e6 * 0.1 / 64 + 1e6 * 0.0005) / 3600)
    # marginal: 100 s per 1,000 more sentences; the commit did not grow: 0
    assert mining["hours_marginal"] == pytest.approx(1e6 * 0.1 / 64 / 3600)
    assert mining["flat_steps"] == ["commit_occurrences_task"]
    # phrases: 0.5 per sentence at replicate 1 -> 5e5; 8 buckets are 8 cores
    assert proj["enwiki"]["phrases"] == pytest.approx(5e5)
    assert aug["hours_rate"] == pytest.approx(5e5 * 0.02 / 8 / 3600)
    assert aug["hours_marginal"] == pytest.approx(5e5 * (8 / 400) / 8 / 3600)
    assert "phrase_buckets=8" in aug["what_moves_it"]
    assert proj["total_hours_marginal"] == pytest.approx(mining["hours_marginal"] + aug["hours_marginal"])
    assert aug["output_gb"] == pytest.approx(2 * 5e5 / 1e9)  # bytes per phrase, the fixed 100 dropped
    assert mining["clean"] and aug["clean"] and proj["bottleneck"] == "phrase_occurrences"  # 0.43 h vs 0.35 h
    # on CPU time (here half the core-seconds), the marginal hours halve; the rate is wall time
    on_cpu = sr.project_stages(results, cores=64, enwiki={"sentences": 1e6, "pages": 1e4})
    assert on_cpu["stages"][1]["hours_marginal"] == pytest.approx(aug["hours_marginal"] / 2)
    assert on_cpu["stages"][1]["hours_rate"] == pytest.approx(aug["hours_rate"])


def test_storage_comparison_keeps_each_storages_fastest_run_per_stage():
    def run(storage, pages, phrases):
        return {"storage": storage, "stages": [{"stage": "pages", "wall_s": pages},
                                               {"stage": "phrases", "wall_s": phrases}]}

    out = sr.storage_comparison([run("disk", 2.0, 4.0), run("s3", 6.0, 5.0), run("disk", 1.0, 5.0),
                                 run("s3", 3.0, 8.0)])
    assert out["stages"] == [{"stage": "pages", "disk_s": 1.0, "s3_s": 3.0, "s3_over_disk": 3.0},
                             {"stage": "phrases", "disk_s": 4.0, "s3_s": 5.0, "s3_over_disk": 1.25}]
    assert out["total"] == {"disk_s": 5.0, "s3_s": 8.0, "s3_over_disk": 1.6}


def test_committed_datasets_and_their_bytes_on_an_object_store(s3_root):
    """What a stage committed and wrote, as the benchmark finds it on S3 (listings, not a local walk)."""
    import pyarrow as pa

    from storage.datasets import Dataset

    schema = pa.schema([("x", pa.int64())])
    d = Dataset(s3_root, "pages", "v1", schema)
    d.write_part(0, pa.table({"x": [1, 2, 3]}, schema=schema))
    assert sr.committed(s3_root) == set()  # written, not committed
    d.commit(code_version="t", params={}, inputs={})
    assert sr.committed(s3_root) == {"pages/v1"}
    assert sr._du(s3_root, "pages/v1") > 0


def test_runs_of_more_distinct_pages_are_the_larger_size():
    # --max-pages 2000,6000 with one copy: sizes 2000 and 6000, the marginal between them; listed
    # larger first, so the order of the runs does not decide
    big, small = (dict(_run(1, 1, n, n // 2, n / 10, n / 100, 1.0), max_pages=m) for n, m in ((3000, 6000), (1000, 2000)))
    proj = sr.project_stages({"runs": [big, small]}, cores=64, enwiki={"sentences": 1e6, "pages": 1e4}, basis="wall")
    assert proj["replicates"] == [2000, 6000]
    assert proj["stages"][0]["hours_marginal"] == pytest.approx(1e6 * 0.1 / 64 / 3600)


def test_a_small_run_goes_through_every_stage_with_the_flows_defaults(tmp_path):
    """The benchmark runs the stages itself, so a change of the flow's wiring (a task given a new
    input, as augmentations got the sentences for context positives) must show here, not in an
    hour-long measurement. One worker, 60 sample pages (4 articles), in a process of its own
    (the run swaps Prefect's logger for its own; run_in_subprocess ends its process group on failure)."""
    made = sr.replicate_inputs(["sample"], 60, 1, tmp_path / "in")
    run = sr.run_in_subprocess(made["paths"], 1, str(tmp_path / "store"),
                               {"pages_per_partition": 10, "sentences_per_chunk": 500}, 0.05, timeout=900)
    c = run["counts"]
    assert c["pages"] == 60 and c["pages"] == c["kept"] + sum(c["filtered"].values()) + sum(c["quarantined"].values())
    # the defaults (parser pmi, ner_scope examples): word totals between mining and the count, then
    # the kept phrases typed from their example sentences
    assert [s["stage"] for s in run["stages"]] == [
        "raw_pages", "pages", "aliases", "corpus_report", "phrase_occurrences", "pmi_word_totals", "phrases",
        "phrase_types", "phrase_report", "word_vectors", "augmentations", "phrase_embeddings", "negatives",
        "training_set"]
    assert all(s["units"] > 0 for s in run["stages"])
    assert {s["task"] for st in run["stages"] for s in st["steps"]} <= _wired_tasks()
    assert [s["units"] for s in run["stages"]] == [c[k] for k in (
        "pages", "pages", "alias_mentions", "pages", "sentences", "sentences", "phrases", "phrases", "phrases",
        "corpus_words", "phrases", "phrases", "phrases", "phrases")]
    assert run["params"]["phrase_params"]["parser"] == "pmi"
    assert run["params"]["phrase_params"]["ner_scope"] == "examples"
    assert {d.split("/")[0] for s in run["stages"] for d in s["outputs"]} >= {
        "raw_pages", "pages", "sentences", "aliases", "phrases", "word_vectors", "augmentations", "negatives",
        "training_set"}
    assert all(s["output_bytes"] > 0 for s in run["stages"] if s["outputs"])
    assert "context" in run["params"]["positive_params"]["augmentations"]["kinds"]  # the flow's default
    assert c["augmentations"] > 0 and c["training_set"] == c["phrases"] > 0


def test_a_small_parsed_run_types_phrases_in_the_mining_pass(tmp_path):
    """parser "spacy" and ner_scope "all", the defaults before the full-size settings: no word totals
    and no typing stage, the NER runs in the mining pass."""
    made = sr.replicate_inputs(["sample"], 60, 1, tmp_path / "in")
    run = sr.run_in_subprocess(made["paths"], 1, str(tmp_path / "store"),
                               {"pages_per_partition": 10, "sentences_per_chunk": 500, "parser": "spacy",
                                "ner_scope": "all"}, 0.05, timeout=900)
    stages = [s["stage"] for s in run["stages"]]
    assert stages[stages.index("phrase_occurrences"):stages.index("phrase_report") + 1] == [
        "phrase_occurrences", "phrases", "phrase_report"]
    assert run["params"]["phrase_params"]["parser"] == "spacy"
    assert "ner_scope" not in run["params"]["phrase_params"]  # "all" keeps the versions it always had
    assert run["counts"]["training_set"] == run["counts"]["phrases"] > 0

