"""The `retrain` flow's fault handling (the full run goes through the server in test_e2e.py)."""
from __future__ import annotations

import asyncio

import pytest

from storage.registry import ModelRegistry
from tests.test_registry import stored_model


def latest_artifact(key: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    async def read():
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
                                               sort=ArtifactSort.CREATED_DESC, limit=1)

    found = asyncio.run(read())
    return found[0] if found else None


def test_a_failing_step_leaves_the_current_model_and_says_where(root, tmp_path):
    from prefect.testing.utilities import prefect_test_harness

    from flows.retrain import retrain
    from tasks.raw_pages.xml_dump import SourceError

    stored_model(root, "m1", tmp_path)
    reg = ModelRegistry(root)
    reg.register("m1")
    reg.promote("m1", "first")
    pointer = reg.pointer()
    with prefect_test_harness():
        with pytest.raises(SourceError, match="input not found"):
            retrain(source=str(tmp_path / "no-such-dump.xml.bz2"), storage_root=root)
        art = latest_artifact("promotion-decision")
    assert reg.pointer() == pointer
    assert art is not None and art.type == "markdown"
    assert "failed at: **build-corpus**" in art.data and "no-such-dump" in art.data and "`m1`" in art.data


def test_unknown_options_are_refused_before_any_work(root):
    from prefect.testing.utilities import prefect_test_harness

    from flows.retrain import retrain

    with prefect_test_harness():
        with pytest.raises(ValueError, match=r"unknown training option\(s\) \['epoch'\]"):
            retrain(storage_root=root, training={"epoch": 2})
        with pytest.raises(ValueError, match=r"unknown corpus option\(s\) \['storage_root'\]"):
            retrain(storage_root=root, corpus={"storage_root": "elsewhere"})
        # a training setting out of its bounds (TrainConfig's) is refused before the corpus is built
        with pytest.raises(ValueError, match=r"batch_size\n  Input should be greater than or equal to 2"):
            retrain(source=str(root) + "/no-such-dump.xml", storage_root=root, training={"batch_size": 1})
