"""The `link` flow end to end on the sample corpus's titles: a real Prefect server (the test
harness's), a real Dask cluster, a tiny random-weight model (tests/conftest.py `tiny_model_dir`).
The `link/tables` deployment's run, on the e2e stack's server (its UI on), is also where the
quickstart's "Where to look" is checked in a browser for a link run (tests/ui_browser.py)."""
from __future__ import annotations

import bz2
import json
import re
import shlex
import string
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests import ui_browser  # noqa: E402
from tests.conftest import tiny_model_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LETTERS = list(string.ascii_lowercase)
KEYS = {"link-counts", "link-scores", "link-examples", "link-threshold", "link-index", "link-matches"}


def sample_titles() -> list[str]:
    """The page titles of the sample dump build-corpus reads by default (206 pages of enwiki)."""
    from tasks.raw_pages.xml_dump import sample_dump

    with bz2.open(sample_dump(), "rt", encoding="utf-8") as f:
        titles = re.findall(r"<title>(.*?)</title>", f.read())
    assert len(titles) > 150
    return titles


def edit(title: str) -> str:
    """A character edit: the second letter dropped."""
    return title[:1] + title[2:] if len(title) > 3 else title + "s"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("link-flow")
    titles = sample_titles()
    pq.write_table(pa.table({"title": pa.array(titles + [None], pa.string())}), d / "titles.parquet")
    exact, edited = titles[:40], [edit(t) for t in titles[40:80]]
    absent = "Qwxz Jvvk"  # no title: labelled with an empty right cell, a name without a partner
    left = exact + edited + [absent, "", None]
    pacsv.write_csv(pa.table({"id": range(len(left)), "name": pa.array(left, pa.string())}), d / "queries.csv")
    pacsv.write_csv(pa.table({"left": exact + edited + [absent], "right": titles[:80] + [""]}), d / "labels.csv")
    (d / "model").mkdir()
    model = tiny_model_dir(d / "model", LETTERS + [f"##{c}" for c in LETTERS])
    return {"left": str(d / "queries.csv"), "right": str(d / "titles.parquet"), "labels": str(d / "labels.csv"),
            "model": str(model), "titles": titles, "left_names": left}


def run_log(flow_run_id) -> list[str]:
    """The messages on one flow run's own log (what `prefect deployment run --watch` prints)."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # send the queued logs before reading them

    async def read():
        async with get_client() as client:
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            return [log.message for log in logs]
    return asyncio.run(read())


def artifacts(flow_run_ids) -> dict:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, FlowRunFilter, \
        FlowRunFilterParentFlowRunId

    async def read():
        async with get_client() as client:
            ids, frontier = list(flow_run_ids), list(flow_run_ids)
            while frontier:
                children = await client.read_flow_runs(flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier)))
                frontier = [c.id for c in children]
                ids += frontier
            arts = await client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=ids)))
            return {a.key: a for a in arts}

    return asyncio.run(read())


def test_link_flow_on_the_sample_titles(inputs, tmp_path):
    from prefect.testing.utilities import prefect_test_harness

    from flows.link import link
    from storage.datasets import Dataset, latest_version
    from storage.schemas import DEDUPED_MATCHES, MATCHES

    root = str(tmp_path / "store")
    params = dict(left=inputs["left"], right=inputs["right"], left_column="name", model=inputs["model"], top_k=2,
                  labels=inputs["labels"], precision=0.8, storage_root=root, partition_rows=64, exact_limit=100,
                  batch_size=1, dask_workers=1)
    with prefect_test_harness():
        state = link(**params, return_state=True)
        result = state.result()
        out = Dataset(root, "matches", result["version"], MATCHES)
        manifest = out.manifest()
        assert latest_version(root, "matches") == result["version"]
        assert manifest["rows"] == result["rows"] == out.read().num_rows > 0
        assert len(manifest["parts"]) == 2  # 83 left rows in partitions of 64
        c = result["counts"]
        assert c["rows"] == 83 and c["skipped"] == 2
        assert c["rows"] == c["skipped"] + c["matched"] + c["below_threshold"] + c["no_candidate"]
        assert c["candidate_pairs"] == c["pairs"] + c["pairs_below_threshold"] == 2 * 81
        assert manifest["stats"]["right"] == {"rows": len(inputs["titles"]) + 1, "skipped": 1, "parts": 4}
        # the right side is above exact_limit: an approximate index, its recall measured
        assert result["index"] == "hnsw" and 0.5 <= result["recall"] <= 1.0
        # a title found as it is scores ~1, above any threshold: matched, to itself
        best = out.read().filter(pc.equal(out.read()["rank"], 1)).to_pylist()
        exact = {r["left"]: r for r in best if r["left_row"] < 40}
        assert len(exact) == len(set(inputs["titles"][:40]))
        assert all(r["right"] == r["left"] and r["score"] == pytest.approx(1, abs=1e-4) for r in exact.values())
        assert manifest["stats"]["threshold"]["source"] == "labels" and result["threshold"] is not None

        arts = artifacts([state.state_details.flow_run_id])
        assert set(arts) >= KEYS
        assert "data:image/png;base64," in arts["link-scores"].data
        assert "chosen for precision 0.8" in arts["link-threshold"].data
        t = manifest["stats"]["threshold"]
        assert (t["labelled"], t["without_partner"]) == (80, 1)  # the absent name's label is read as no partner
        assert "on 80 left names labelled with a partner and 1 without" in arts["link-threshold"].data
        assert "precision {:.3f} (95% {:.3f}-{:.3f}".format(t["precision"], *t["precision_interval"]) \
            in arts["link-threshold"].data
        assert "Recall@2 against exact" in arts["link-index"].data
        assert "left: null or empty names (skipped)" in arts["link-counts"].data
        matches_md = arts["link-matches"].data  # the dataset as a path to copy, and a command that reads it
        assert f"```text\n{out.url}\n```" in matches_md and "file://" not in matches_md
        command = re.search(r"```bash\n(.*)\n```", matches_md).group(1).split(" ", 1)
        assert command[0] == "python"
        printed = subprocess.run(f"{shlex.quote(sys.executable)} {command[1]}", shell=True, cwd=ROOT,
                                 capture_output=True, text=True, timeout=120)
        assert printed.returncode == 0 and "left_row" in printed.stdout, printed.stderr
        # the summary, logged in the link-stages subflow, is on the link run's own log: the one --watch prints
        summary = [m for m in run_log(state.state_details.flow_run_id) if m.startswith(f"link: matches {result['version']}")]
        assert len(summary) == 1 and "chosen for precision 0.8: precision" in summary[0], summary
        assert f"left rows: {c['rows']} = {c['matched']} matched" in summary[0] and f"dataset: {out.url}" in summary[0], summary[0]

        # the same inputs and parameters: the committed version is reused
        again = link(**params)
        assert again["version"] == result["version"] and out.manifest()["created_at"] == manifest["created_at"]

        # index shards of two right partitions, efSearch tuned to a recall target on each while it is indexed:
        # another version, two indexes queried at the efSearch chosen, every row accounted for
        sharded = link(**{**params, "index_rows": 128, "recall_target": 0.9})
        index = Dataset(root, "matches", sharded["version"], MATCHES).manifest()["stats"]["index"]
        assert sharded["version"] != result["version"] and len(index["recall_per_part"]) == 2
        assert [t["shard"] for t in index["tuning"]] == [0, 1] and index["target_met"] is True
        assert sharded["ef_search"] == index["ef_search"] == max(t["ef_search"] for t in index["tuning"])
        # the default: one shard, its efSearch tuned to the default target
        first = out.manifest()["stats"]["index"]
        assert len(first["recall_per_part"]) == 1 and first["recall_target"] == 0.98
        assert result["ef_search"] == first["tuning"][0]["ef_search"]
        s = sharded["counts"]
        assert (s["rows"], s["skipped"], s["candidate_pairs"]) == (83, 2, 2 * 81)
        assert s["rows"] == s["skipped"] + s["matched"] + s["below_threshold"] + s["no_candidate"]

        # dedupe of the right table, sharded: the left tasks gather the right side's vectors before the
        # indexes take them (each name encoded once); every row accounted for, no row matched to itself
        deduped = link(**{**params, "left": inputs["right"], "right": None, "left_column": "title", "labels": None,
                          "dedupe": True, "threshold": 0.5, "index_rows": 128})
        d = deduped["counts"]
        assert d["rows"] == len(inputs["titles"]) + 1 and d["skipped"] == 1
        assert d["rows"] == d["skipped"] + d["matched"] + d["below_threshold"] + d["no_candidate"]
        pairs = Dataset(root, "deduped_matches", deduped["version"], DEDUPED_MATCHES).read().to_pylist()
        assert pairs and all(r["left_row"] != r["right_row"] for r in pairs)

        # bad input: the run fails with the reason, and commits nothing
        failed = link(**{**params, "left_column": "title", "storage_root": str(tmp_path / "other")},
                      return_state=True)
        assert failed.is_failed()
        with pytest.raises(Exception, match="has no column 'title'"):
            failed.result()
        assert latest_version(str(tmp_path / "other"), "matches") is None


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_link_tables_deployment_runs_from_the_cli(stack, inputs, tmp_path, request):
    """`prefect deployment run link/tables --param left=... --param right=... --param labels=...` on the
    deployed prefect.yaml (the e2e stack: a server with its UI, a process worker, scripts/deploy.sh), as
    the quickstart runs it; then the run in the server's two UIs, as the quickstart's "Where to look" has it."""
    from storage.datasets import latest_version
    from tests.e2e_fixtures import run_deployment

    root = tmp_path / "store"
    done = run_deployment(stack, root, "e2e-link", deployment="link/tables",
                          params={"left": inputs["left"], "right": inputs["right"], "left_column": "name",
                                  "model": inputs["model"], "labels": inputs["labels"], "dask_workers": 1})
    result = done["result"]
    assert latest_version(str(root), "matches") == result["version"] and result["index"] == "exact"
    assert result["counts"]["rows"] == len(inputs["left_names"])
    arts = {}
    for a in done["artifacts"]:
        arts.setdefault(a.key, a)
    assert set(arts) >= KEYS
    threshold = json.loads((root / "matches" / result["version"] / "_manifest.json").read_text())["stats"]["threshold"]
    assert threshold["source"] == "labels" and threshold["target"] == 0.9 and result["threshold"] == threshold["value"]
    check_where_to_look(stack, done["run"], arts, f"{root}/matches/{result['version']}", threshold,
                        ui_browser.screenshot_dir(request))


def check_where_to_look(stack, run, arts: dict, location: str, threshold: dict, shots: Path) -> None:
    """docs/quickstart.md, "5. Where to look in the UI", on a `link` run made as the quickstart makes
    it, in each of the server's UIs (v1, and v2 where the server's root sends a new browser): Runs
    lists the run; its page leads to its subflow run `link-stages`, whose Artifacts tab holds the six
    link-* artifacts; each opens and shows what the page says it holds."""
    ui_browser.require_browser()

    async def children(client):
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

        return await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id])))

    child = [c for c in stack.api(children) if arts["link-counts"].flow_run_id == c.id]
    assert len(child) == 1, "the link-* artifacts are not a child run's of the link run"
    child = child[0]
    with ui_browser.open_browser() as browser:
        for page, base, at in ui_browser.each_ui(browser, stack.ui_url, stack.auth_string, shots):
            ui_browser.open_run(page, base, run, ["link", "Subflow Runs"], at)
            ui_browser.click(page, ui_browser.tab(page, "Subflow Runs"), [child.name], at / "link-subflow-runs.png")
            ui_browser.click(page, ui_browser.link(page, child.name), [child.name, "link-stages", "Artifacts"],
                             at / "link-stages-run.png", url=ui_browser.flow_run_url(base, child.id))
            ui_browser.click(page, ui_browser.tab(page, "Artifacts"), sorted(KEYS), at / "link-stages-artifacts.png")
            for key in KEYS:  # each listed there leads to its artifact
                assert ui_browser.artifact_card(page, base, arts[key]).count() == 1, key
            check_link_artifacts(page, base, at, arts, location, threshold)


def check_link_artifacts(page, base: str, shots: Path, arts: dict, location: str, threshold: dict) -> None:
    """Each link-* artifact's page shows what the quickstart says: a table's cells, a markdown's
    headings and text rendered, its figures loaded, a location as text. The first is opened from the
    Artifacts tab shown, the others by their addresses."""
    def opened(key: str, texts: list[str]) -> str:
        return ui_browser.visit(page, ui_browser.artifact_url(base, arts[key].id), [key, *texts],
                                shots / f"artifact-{key}.png")

    # the threshold chosen from the labels for precision 0.9, its precision and recall with their 95%
    # intervals and counts, and the precision/recall curve
    t = threshold
    text = ui_browser.open_artifact(page, base, arts["link-threshold"], [f"Threshold {t['value']:.4f}, chosen for precision 0.9",
                                     "precision {:.3f} (95% {:.3f}-{:.3f}".format(t["precision"], *t["precision_interval"]),
                                     "recall {:.3f} (95% {:.3f}-{:.3f}".format(t["recall"], *t["recall_interval"]),
                                     f"on {t['labelled']} left names labelled with a partner"],
                                    shots / "artifact-link-threshold.png")
    assert page.get_by_role("heading", name=f"Threshold {t['value']:.4f}").count() == 1 and "# Threshold" not in text
    ui_browser.assert_image(page, "precision/recall curve")
    opened("link-scores", ["Scores of the best matches"])
    ui_browser.assert_image(page, "score histogram")
    # the matches around the threshold: a table of pairs with their scores
    example = json.loads(arts["link-examples"].data)[0]
    text = opened("link-examples", ["left_row", "right_row", "score", example["left"], example["right"]])
    assert page.get_by_role("columnheader", name="score").count() == 1, text
    # how every left row ended: a row each, with its count
    text = opened("link-counts", ["left: rows", "left: matched", "left: null or empty names (skipped)"])
    for row in json.loads(arts["link-counts"].data)[:2]:
        shown = ui_browser.table_row(page, row["count"])
        assert shown.count() == 1 and shown.inner_text().split()[-1] == str(row["value"]), text
    opened("link-index", ["Index: exact", "Every right name is scored for each query"])
    # the dataset's path to copy and a command that reads it, no file:// link
    text = opened("link-matches", [location, "Use it:", "python -c"])
    assert page.locator('a[href^="file:"]').count() == 0 and "```" not in text, text
