"""The training settings (:class:`TrainConfig`), apart from the training code: the `train` flow's
signature reads them without importing torch."""
from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from pearl_redact import no_userinfo_schema

PositiveFloat = Annotated[float, Field(gt=0)]
UnitFloat = Annotated[float, Field(ge=0, le=1)]
# a string of the train flow's parameters: its JSON schema refuses a URL with credentials (flows/parameters.py)
Name = Annotated[str, WithJsonSchema({"type": "string", **no_userinfo_schema()})]


class TrainConfig(BaseModel):
    """Every training setting, defined here once: its default (the recipe the `train` flow runs;
    docs/model.md says how each was chosen), its bounds and its description. The `train` flow
    takes one as its ``training`` parameter (a form in the Prefect UI, refused before the run starts
    when a value is out of bounds), :func:`train` reads it, and :meth:`version_params` is what the
    model version hashes. A value that cannot work is refused on construction, with its name.

    ``char_proj_dim`` and ``type_input`` shape the model (:func:`build_model`), ``average_weight``
    and ``char_scale`` its export, ``restarts`` the `train` task's seeds: recipe settings all the same.
    """
    model_config = ConfigDict(frozen=True, extra="forbid")

    epochs: int = Field(2, ge=1, description="passes over the training phrases (the paper's 2)")
    batch_size: int = Field(512, ge=2, description="anchors per step (the paper's 512; InfoNCE needs >= 2)")
    max_steps: Optional[int] = Field(None, ge=1, description="stop after this many steps (tiny or budgeted runs)")
    hard_negatives: int = Field(2, ge=0, description="mined hard negatives per anchor (the paper's 2)")
    lr: float = Field(3e-5, gt=0, description="Adam's learning rate (the paper's 3e-5; the authors' code 1e-5)")
    lr_decay: float = Field(0.98, gt=0, le=1, description="learning rate x this every lr_decay_every steps")
    lr_decay_every: int = Field(2000, ge=1, description="steps between learning-rate decays")
    temperature: float = Field(0.07, gt=0, description="InfoNCE's temperature on cosines")
    char_proj_dim: int = Field(96, ge=0, description="the character vector's projection (the paper's 96 for "
                                                     "small; 0: no character branch)")
    type_loss_weight: float = Field(1.0, ge=0, description="the 95-type cross entropy's weight (0: off)")
    type_loss_on: Literal["anchors", "both"] = Field(
        "anchors", description="the type loss on the anchors, or on anchors and positives (the authors' code)")
    type_loss_labels: Literal["entities", "all"] = Field(
        "entities", description="entities: the *-OTHER phrases left out (on dev data the OTHER classes pulled "
                                "chemicals and diseases together); all: the 95 labels (the paper)")
    type_input: Literal["raw", "unit"] = Field(
        "raw", description="the type head reads the raw vector (the paper) or the unit vector")
    positive_kinds: Optional[tuple[Name, ...]] = Field(
        None, min_length=1, description="the positive kinds drawn (char, swap_tokens, change_case, wordnet, "
                                        "fasttext, alias, paraphrase, context); none: all that apply")
    freeze_embeddings: bool = Field(True, description="keep the backbone's embedding matrix as it is")
    freeze_layers: Optional[int] = Field(
        None, ge=0, description="keep the lowest N transformer layers as they are (none: the lower half; 0: "
                                "train all). On dev data the lower half frozen keeps BC5CDR's chemical/disease "
                                "split, at less time per anchor (docs/research/recipe-freezing.md)")
    distill_weight: float = Field(10.0, ge=0, description="weight of the term that keeps the anchors where the "
                                                          "original backbone put them (0: off)")
    distill_temperature: float = Field(0.05, gt=0, description="the layout target's softmax temperature")
    distill_target: Literal["layout", "vectors"] = Field(
        "vectors", description="keep the anchors' similarities to each other (layout) or each anchor's own "
                               "direction (vectors: 1 - cosine to the original backbone's vector)")
    distill_labels: Literal["all", "other"] = Field(
        "all", description="the anchors the distillation applies to: all, or only the *-OTHER ones")
    distill_norm_weight: float = Field(
        0.0, ge=0, description="with distill_target vectors, also keep each anchor's norm (squared log ratio; 0: off)")
    sense_loss_weight: float = Field(
        0.0, ge=0, description="a training-only head for the WordNet supersense of OTHER noun phrases (0: off)")
    average_weight: Union[UnitFloat, Annotated[tuple[UnitFloat, ...], Field(min_length=1)]] = Field(
        (0.5, 0.25), description="the fine-tuned backbone's share when averaged with the original at export "
        "(the paper's 0.5); several: checkpoints are chosen at the first, and the kept one is exported at the "
        "first that loses on no dev signal, tried in order (docs/research/recipe-averaging.md)")
    char_scale: Union[PositiveFloat, Annotated[tuple[PositiveFloat, ...], Field(min_length=1)]] = Field(
        0.5, description="the character part of the exported vector x this (1: as trained); several: the dev "
                         "selection scores each checkpoint at each and keeps the best (ties: the first)")
    select_every: int = Field(
        50, ge=0, description="score the checkpoint as exported on the dev splits and held-out aliases every "
                              "this many steps (and at the end), and export the best by select_rule; 0: the "
                              "last one")
    select_rule: Literal["worst", "mean"] = Field(
        "mean", description="which checkpoint the dev selection keeps: worst, the largest worst change against "
                             "the backbone; mean, the largest mean change among those losing on no dev signal "
                             "(none such: as worst)")
    select_synonym_pairs: int = Field(
        10000, ge=0, description="WordNet synonym pairs (name -> the synset's first name; synsets holding a training "
                                "string left out) retrieved as a dev signal of name variants (0: off)")
    restarts: int = Field(1, ge=1, description="seeds tried at most: another only while no kept checkpoint is at "
                                               "or above the backbone on every dev signal (needs select_every)")
    seed: int = Field(0, description="data order, augmentation draws and the new layers' init")
    device: Name = Field("auto", description="auto (CUDA when present), cpu, cuda or cuda:N")
    bf16: bool = Field(True, description="bf16 autocast on CUDA (ignored on CPU)")
    cpu_bf16: bool = Field(False, description="bf16 autocast on a CPU that runs bf16 natively (AVX512-BF16 or "
                                              "AMX; fp32 on any other): twice the anchors/s of fp32 on this "
                                              "project's CPU, off because one dev set came out below fp32 "
                                              "beyond its interval (docs/research/speed-training.md). Where it runs, not what is "
                                              "trained: not part of the model version, like device")
    checkpoint_every: int = Field(500, ge=0, description="steps between checkpoints (0: only at the end)")
    keep_checkpoints: int = Field(2, ge=1, description="checkpoints kept on disk")
    log_every: int = Field(10, ge=1, description="steps between log records")
    bucket_window: int = Field(50, ge=1, description="length-sort anchors within windows of this many batches")
    num_workers: Optional[int] = Field(None, ge=0, description="DataLoader workers (none: 4 on CUDA, 0 on CPU)")
    torch_compile: Literal["off", "default", "reduce-overhead", "max-autotune"] = Field(
        "off", description="torch.compile the backbone (and the distillation teacher) in this mode; "
                           "reduce-overhead adds CUDA graphs. Off: not measured yet (docs/research/speed-gpu.md)")
    max_length: Optional[int] = Field(None, ge=1, description="token cap (none: the backbone's)")

    # where the settings are run, not what is trained: not part of the model version
    RUNTIME: ClassVar[frozenset] = frozenset({"device", "cpu_bf16", "num_workers", "log_every", "keep_checkpoints",
                                              "checkpoint_every", "torch_compile"})

    @model_validator(mode="after")
    def _consistent(self):
        if self.distill_norm_weight > 0 and not (self.distill_weight > 0 and self.distill_target == "vectors"):
            raise ValueError("distill_norm_weight pins the anchors' norms beside their directions: it needs "
                             f"distill_weight > 0 and distill_target 'vectors', got {self.distill_weight!r} and "
                             f"{self.distill_target!r}")
        if self.restarts > 1 and not self.select_every:
            raise ValueError("restarts > 1 needs select_every > 0: the dev checks are what says whether another "
                             "seed is needed and which run is kept")
        return self

    @property
    def average_weights(self) -> list[float]:
        """The averaging weights: one, or the dev selection's candidates in order of preference."""
        return list(self.average_weight) if isinstance(self.average_weight, tuple) else [self.average_weight]

    @property
    def char_scales(self) -> list[float]:
        """The character-part scales: one, or the dev selection's candidates in order of preference."""
        return list(self.char_scale) if isinstance(self.char_scale, tuple) else [self.char_scale]

    def updated(self, **changes) -> "TrainConfig":
        """A copy with ``changes``, validated like a new one."""
        return type(self).model_validate({**self.model_dump(), **changes})

    def version_params(self) -> dict:
        """The settings a model version hashes: all but where they run (:attr:`RUNTIME`)."""
        return self.model_dump(mode="json", exclude=set(self.RUNTIME))
