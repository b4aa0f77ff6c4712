"""Versions that come from outside (flow parameters, pointer files, manifests) are checked
against storage.datasets.VERSION_PATTERN before they name a path (issue 13 item 10)."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from storage.datasets import Dataset
from storage.files import FileSet
from storage.schemas import AUGMENTATIONS, TRAINING_SET
from tasks.training import resolve_training_set, word_vectors_of

ROW = {"phrase": "red car", "phrase_key": "red car#0", "label": "NP-OTHER", "label_id": 0, "frequency": 2,
       "positives": [], "negatives": [], "split": "train"}


def training_set(root: str, version: str = "ts1", augmentations: str = "aug1") -> Dataset:
    ts = Dataset(root, "training_set", version, TRAINING_SET)
    ts.write_part(0, pa.Table.from_pylist([ROW], schema=TRAINING_SET))
    ts.commit(code_version="t", params={}, inputs={"augmentations": augmentations})
    return ts


def test_training_set_version_parameter_is_not_a_path(tmp_path):
    training_set(str(tmp_path / "other"))
    root = str(tmp_path / "store")
    training_set(root, "ts2")
    bad = "../../other/training_set/ts1"  # from store/training_set/: trained on other's data before
    with pytest.raises(ValueError, match=r"training_set_version '../../other/training_set/ts1' is not a version: "
                                         r"expected"):
        resolve_training_set(root, bad)
    assert resolve_training_set(root, "ts2").read().num_rows == 1
    assert resolve_training_set(root).version == "ts2"  # none: the published one


def test_an_edited_training_set_pointer_is_not_followed(tmp_path):
    training_set(str(tmp_path / "other"))
    root = tmp_path / "store"
    training_set(str(root), "ts2")
    (root / "training_set" / "_latest.json").write_text(json.dumps({"version": "../../other/training_set/ts1"}))
    with pytest.raises(ValueError, match=r"_latest.json '../../other/training_set/ts1' is not a version"):
        resolve_training_set(str(root))


def test_an_edited_manifest_input_is_not_followed(tmp_path):
    """word_vectors_of walks the manifests' input versions: an edited one names no other directory."""
    for root in (tmp_path / "other", tmp_path / "store"):
        Dataset(str(root), "augmentations", "aug1", AUGMENTATIONS).commit(code_version="t", params={},
                                                                           inputs={"word_vectors": "wv1"})
    ts = training_set(str(tmp_path / "store"), augmentations="../../other/augmentations/aug1")
    with pytest.raises(ValueError, match=r"dataset augmentations version '../../other/augmentations/aug1'"):
        word_vectors_of(ts)


def test_the_train_flow_rejects_a_path_as_training_set_version():
    """Prefect validates flow parameters (and a deployment's schema carries the pattern, so the UI
    and the API refuse such a run before it starts)."""
    from prefect.exceptions import ParameterTypeError
    from prefect.utilities.callables import parameter_schema

    from flows.train import train
    from storage.datasets import VERSION_PATTERN

    assert train.validate_parameters({"training_set_version": "3f9c2a7b1d0e4c55"})["training_set_version"] \
        == "3f9c2a7b1d0e4c55"
    assert train.validate_parameters({"training_set_version": None})["training_set_version"] is None
    with pytest.raises(ParameterTypeError, match="(?s)training_set_version.*should match pattern"):
        train.validate_parameters({"training_set_version": "../../other/training_set/ts1"})
    schema = json.dumps(parameter_schema(train).model_dump()["properties"]["training_set_version"])
    assert json.dumps(VERSION_PATTERN)[1:-1] in schema


def test_evaluate_current_does_not_follow_an_edited_registry_pointer(tmp_path):
    from storage.registry import InvalidModelVersion
    from tasks.evaluation import resolve_models

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.safetensors").write_bytes(b"weights")
    for root, version in ((tmp_path / "other", "m9"), (tmp_path / "store", "m1")):
        FileSet(str(root), "models", version).upload(tmp_path / "model", code_version="t", params={}, inputs={})
    root = tmp_path / "store"
    (root / "registry").mkdir()
    (root / "registry" / "current.json").write_text(json.dumps({"version": "../../other/models/m9", "history": []}))
    with pytest.raises(InvalidModelVersion, match=r"current.json '../../other/models/m9' is not a version"):
        resolve_models(["current", "minilm"], "current", str(root))


@pytest.mark.parametrize("flow_path, field, value, rule", [
    ("flows.train:train", "training.average_weight", 1.5, "less than or equal to 1"),
    ("flows.train:train", "training.restarts", 0, "greater than or equal to 1"),
    ("flows.train:train", "training.type_loss_weight", -0.1, "greater than or equal to 0"),
    ("flows.train:train", "alias_holdout_pairs", -1, "greater than or equal to 0"),
    ("flows.build_corpus:build_corpus", "training_set.alias_holdout_fraction", 2.0, "less than or equal to 1"),
    ("flows.build_corpus:build_corpus", "phrases.pmi_min_npmi", -1.5, "greater than or equal to -1"),
    ("flows.build_corpus:build_corpus", "read.max_pages", 0, "greater than or equal to 1"),
])
def test_a_parameter_out_of_its_bounds_is_refused_before_the_run_with_its_name(flow_path, field, value, rule):
    """What Prefect checks before a run starts (and the deployment's schema carries the bound)."""
    import importlib

    from prefect.exceptions import ParameterTypeError
    from prefect.utilities.callables import parameter_schema

    module, name = flow_path.split(":")
    flow = getattr(importlib.import_module(module), name)
    group, _, inner = field.rpartition(".")  # training.x: a field of the settings model the `training` parameter is
    with pytest.raises(ParameterTypeError, match=f"(?s){group}.*{inner}.*{rule}"):
        flow.validate_parameters({group: {inner: value}} if group else {inner: value})
    schema = parameter_schema(flow).model_dump()
    props = schema["properties"]
    if group:  # the model's schema, referenced from the parameter's
        props = schema["definitions"][props[group]["$ref"].rsplit("/", 1)[1]]["properties"]
    prop = json.dumps(props[inner])
    assert "minimum" in prop or "maximum" in prop
