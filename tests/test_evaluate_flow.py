"""The `evaluate` flow end to end on a subset: real Prefect (test harness), real Dask."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from pearl_model.evaluation import data  # noqa: E402
from pearl_model.evaluation.data import DatasetMissing  # noqa: E402
from tests.conftest import stored_parts  # noqa: E402

BENCH = data.default_benchmark_dir()
pytestmark = pytest.mark.skipif(BENCH is None, reason="PEARL benchmark files not beside the checkout")
WORDS = ["the", "new", "york", "times", "big", "cat", "lion", "dog", "of", "a"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-model")
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS))
    transformers.BertTokenizerFast(str(d / "vocab.txt")).save_pretrained(d)
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    transformers.BertModel(cfg, add_pooling_layer=False).save_pretrained(d)
    (d / "pearl_backbone.json").write_text(json.dumps({"pooling": "mean", "query_prefix": "",
                                                       "add_pooling_layer": False}))
    return str(d)


def test_evaluate_flow_writes_results_report_and_map(tiny_model, tmp_path):
    from prefect.testing.utilities import prefect_test_harness

    from flows.evaluate import evaluate
    from storage.datasets import Dataset
    from storage.schemas import EVAL_RESULTS

    from tests.test_lexical_diversity_stage import tiny_corpus

    tiny_corpus(str(tmp_path))  # phrases and aliases: the lexical-diversity step's sample
    with prefect_test_harness():
        result = evaluate(models=[tiny_model, "char3gram"], benchmark_dir=str(BENCH),
                          datasets=["turney", "bird", "autofj"], seeds=[0], storage_root=str(tmp_path),
                          map_model=tiny_model, dask_workers=1)
        ds = Dataset(str(tmp_path), "eval_results", result["version"], EVAL_RESULTS)
        manifest = ds.manifest()
        rows = ds.read().to_pylist()
        assert manifest["rows"] == len(rows) == sum(pq.read_metadata(f).num_rows for f in stored_parts(ds))
        by_model = {}
        for r in rows:
            by_model.setdefault(r["model"], set()).add(r["dataset"])
        assert by_model[tiny_model] == {"turney", "bird", "autofj"}
        assert by_model["char3gram"] == {"autofj"}  # similarity-only baseline: AutoFJ alone
        char = next(r for r in rows if r["model"] == "char3gram" and r["metric"] == "accuracy")
        assert char["value"] == pytest.approx(62.6, abs=0.1)
        png = (tmp_path / "eval_results" / result["version"] / "entity_map.png").read_bytes()
        assert png.startswith(b"\x89PNG")
        table = result["table"]
        assert [t["model"] for t in table[:2]] == [tiny_model, "char3gram"]
        assert any(t["model"].endswith("(paper)") for t in table)
        diversity = result["lexical_diversity"]
        assert list(diversity["models"]) == [tiny_model]  # char3gram gives no vectors
        assert diversity["setup"]["queries"] == 36 and diversity["setup"]["queries_with_aliases_in_corpus"] == 4
        assert 0 <= diversity["models"][tiny_model]["scores"]["diverse@10"] <= 100

        # a rerun with the same models and data reuses the committed version
        again = evaluate(models=[tiny_model, "char3gram"], benchmark_dir=str(BENCH),
                         datasets=["turney", "bird", "autofj"], seeds=[0], storage_root=str(tmp_path),
                         map_model=None, dask_workers=1, lexical_diversity=False)
        assert again["version"] == result["version"]
        assert ds.manifest()["created_at"] == manifest["created_at"]

        import asyncio

        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

        async def keys():
            async with get_client() as client:
                arts = await client.read_artifacts(artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(any_=["benchmark-scores", "benchmark-report", "lexical-diversity",
                                                "lexical-diversity-report"])))
                return {a.key for a in arts}

        assert asyncio.run(keys()) == {"benchmark-scores", "benchmark-report", "lexical-diversity",
                                       "lexical-diversity-report"}
        assert "lexical_diversity" not in again
        # no corpus under the storage root: the step says so and the scores still come
        bare = evaluate(models=[tiny_model], benchmark_dir=str(BENCH), datasets=["turney"], seeds=[0],
                        storage_root=str(tmp_path / "bare"), map_model=None, dask_workers=1)
        assert bare["lexical_diversity"] is None and bare["table"]
        # the entity map's benchmark file missing: the run fails with that file's name, not with the
        # report's NotReady (a TypeError on None)
        only_turney = tmp_path / "turney-only"
        shutil.copytree(Path(BENCH) / "turney", only_turney / "turney")
        with pytest.raises(DatasetMissing, match="conll2003"):
            evaluate(models=[tiny_model], benchmark_dir=str(only_turney), datasets=["turney"], seeds=[0],
                     storage_root=str(tmp_path / "bare"), map_model=tiny_model, dask_workers=1,
                     lexical_diversity=False)

        # Another version of the results (char3gram alone, on AutoFJ): its rows are read back from
        # the storage root's eval_rows/, not scored again. A kept value edited by hand with its digest
        # computed again comes back (the storage root is trusted that far), which only reading back
        # can do; edited without it, the file is refused and scored afresh (issue 54, item 3);
        # reuse_scores=false scores afresh and gives the true one.
        from pearl_model.evaluation.row_cache import rows_digest

        kept = list((tmp_path / "eval_rows").glob("autofj-*.json"))
        assert len(kept) == 2  # one per model: the tiny model's and char3gram's
        char_kept = [p for p in kept if abs(json.loads(p.read_text())["rows"][0]["value"] - char["value"]) < 1e-9]
        assert len(char_kept) == 1

        def edit(value: float, digest: bool) -> None:
            entry = json.loads(char_kept[0].read_text())
            entry["rows"][0]["value"] = value
            if digest:
                entry["sha256"] = rows_digest(entry["key"], entry["rows"])
            char_kept[0].write_text(json.dumps(entry))

        edit(12.5, digest=True)
        read_back = evaluate(models=["char3gram"], benchmark_dir=str(BENCH), datasets=["autofj"], seeds=[0],
                             storage_root=str(tmp_path), map_model=None, dask_workers=1, lexical_diversity=False)
        assert read_back["version"] != result["version"]
        assert [t["autofj"] for t in read_back["table"] if t["model"] == "char3gram"] == ["12.5"]
        edit(13.5, digest=False)
        refused = evaluate(models=["char3gram"], benchmark_dir=str(BENCH), datasets=["turney", "autofj"], seeds=[0],
                           storage_root=str(tmp_path), map_model=None, dask_workers=1, lexical_diversity=False)
        assert refused["version"] not in (result["version"], read_back["version"])
        assert [t["autofj"] for t in refused["table"] if t["model"] == "char3gram"] == ["62.6"]
        assert json.loads(char_kept[0].read_text())["rows"][0]["value"] == pytest.approx(char["value"])
        fresh = evaluate(models=["char3gram"], benchmark_dir=str(BENCH), datasets=["autofj"], seeds=[0, 1],
                         storage_root=str(tmp_path), map_model=None, dask_workers=1, lexical_diversity=False,
                         reuse_scores=False)
        assert [t["autofj"] for t in fresh["table"] if t["model"] == "char3gram"] == ["62.6"]
