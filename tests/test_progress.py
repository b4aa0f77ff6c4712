"""Progress where a run was started (runs/progress.py): a subflow's stage lines and a run's summary
reach the log of the run `prefect deployment run --watch` follows, the parent's, as they happen."""
from __future__ import annotations

import asyncio
import logging

import pyarrow as pa
from prefect import flow

from runs.progress import LoggedSteps, log_summary, logs_in_run, run_log
from storage.datasets import Dataset

SCHEMA = pa.schema([("x", pa.int64())])


def committed(root: str, name: str, rows: int) -> Dataset:
    d = Dataset(root, name, "v1", SCHEMA)
    d.write_part(0, pa.table({"x": list(range(rows))}, schema=SCHEMA))
    d.commit(code_version="t", params={}, inputs={})
    return d


def test_stages_are_logged_with_their_rows_and_times(root):
    lines = []
    steps = LoggedSteps(lines.append)
    steps.stage("pages")
    steps.call(lambda: (committed(root, "pages", 3), committed(root, "sentences", 7)))
    steps.stage("phrases")
    steps.call(lambda: Dataset(root, "phrases", "v1", SCHEMA))  # planned, never committed: no rows to say
    steps.end()
    steps.end()  # nothing open: nothing more
    assert [line.split(" done in ")[0] for line in lines] == [
        "stage pages: started", "stage pages:", "stage phrases: started", "stage phrases:"]
    assert lines[1].endswith(" s (pages 3 rows, sentences 7 rows)") and lines[3].endswith(" s")


def test_a_subflow_logs_its_stages_and_the_summary_to_the_parent_run_too(root):
    """...and a stage's plain function's own module logger, inside `logs_in_run` only."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler
    from prefect.testing.utilities import prefect_test_harness

    @flow(name="stages-child")
    def child() -> None:
        steps = LoggedSteps(run_log())
        steps.stage("pages")
        steps.call(lambda: committed(root, "pages", 5))
        steps.end()
        log_summary("child built", ["pages v1 5 rows"])
        stage = logging.getLogger("tests.a_stage")  # as a stage's module logs: below the root's WARNING
        stage.info("before the block: not in the run")
        with logs_in_run("tests.a_stage"):
            stage.info("the stage's own line: %d rows", 5)
            stage.warning("the stage's own warning")
        stage.info("after the block: not in the run")
        assert stage.level == logging.NOTSET and not stage.handlers

    @flow(name="stages-parent")
    def parent():
        state = child(return_state=True)
        return state.state_details.flow_run_id

    async def messages(run_id):
        async with get_client() as client:
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
            return [log.message for log in logs]

    with prefect_test_harness():
        state = parent(return_state=True)
        child_id = state.result()
        APILogHandler().flush()  # send the queued logs before reading them
        parent_id = state.state_details.flow_run_id
        on_parent, on_child = asyncio.run(messages(parent_id)), asyncio.run(messages(child_id))
    for said in (on_parent, on_child):
        assert "stage pages: started" in said, said
        assert any(m.startswith("stage pages: done in ") and m.endswith("(pages 5 rows)") for m in said), said
        assert "child built:\n  pages v1 5 rows" in said, said
        assert "the stage's own line: 5 rows" in said and "the stage's own warning" in said, said
        assert not any("the block: not in the run" in m for m in said), said


def test_the_summaries_say_what_each_run_ended_with(root):
    from storage.files import FileSet
    from tasks.corpus_report import summary_lines as build_summary
    from tasks.matches import summary_lines as link_summary
    from tasks.training import summary_lines as train_summary

    committed(root, "pages", 1234)
    assert build_summary(root, {"pages": "v1"}) == ["pages  v1         1,234 rows"]

    stats = {"steps": 20, "val_loss": 1.23456, "alias_top1_exported": 0.5, "alias_mrr_exported": 0.625,
             "selected_step": 20, "dev_bird:dev": 61.04, "dev_heldout_alias_top1": 50.0}
    lines = train_summary(FileSet(root, "models", "m1"), stats)
    assert lines[:4] == [f"directory: {root}/models/m1", "steps: 20, validation loss 1.2346",
                         "held-out aliases -> titles: top-1 0.500, MRR 0.625",
                         "dev scores (step 20 kept, x100): bird:dev 61.0, heldout_alias_top1 50.0"]
    assert f"use it: pearl models promote m1 --storage-root {root}" in lines

    counts = {"rows": 100, "matched": 80, "below_threshold": 15, "no_candidate": 0, "skipped": 5, "pairs": 80,
              "candidate_pairs": 95, "pairs_below_threshold": 15}
    chosen = {"source": "labels", "value": 0.81234, "target": 0.9, "precision": 0.912, "recall": 0.85,
              "labelled": 90, "note": "n"}
    lines = link_summary({"stats": {"threshold": chosen, "counts": counts}}, f"{root}/matches/v1")
    assert lines == ["threshold 0.8123, chosen for precision 0.9: precision 0.912, recall 0.850 on 90 labelled left rows",
                     "left rows: 100 = 80 matched + 15 below the threshold + 0 with no candidate + 5 null or empty "
                     "(skipped)", "pairs kept: 80 of 95 candidates", f"dataset: {root}/matches/v1"]
    none = {"source": "none", "value": None, "note": "no threshold: every candidate is kept"}
    assert link_summary({"stats": {"threshold": none, "counts": counts, "clusters": 7}}, "s3://b/m")[0::2] == [
        "no threshold: every candidate is kept", "pairs kept: 80 of 95 candidates, 7 clusters"]
