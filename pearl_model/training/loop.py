"""PEARL training: read it top to bottom (after nanoGPT's train.py).

One step takes B anchors (length-bucketed), one positive per anchor and up to k hard
negatives per anchor. Every anchor is scored against all positives and negatives of the
batch (InfoNCE on cosine, temperature 0.07: the positives of the other anchors and all
hard negatives are its negatives); the type head adds the cross entropy of the anchors'
95-way labels. Adam 3e-5, lr x0.98 every 2000 steps, 2 epochs, batch 512 (the paper's).

Positives: per anchor and step one *kind* is drawn uniformly among those that apply to it:
``char`` (one of the character operators of :mod:`pearl_model.pairs.augment`), ``swap_tokens``
(when the phrase has two tokens), ``change_case`` (another letter case; not in the paper:
without it the model learnt case as a cheap way to tell phrases apart, docs/model.md),
and each cached kind the training set holds for it
(wordnet, fasttext, alias, paraphrase); then one text of that kind. Character operators
count as one kind so that typos do not crowd out the semantic positives four to one.
``positive_kinds`` restricts the draw to some kinds (an ablation leaves one out).

Validation, before training and after each epoch: the loss terms on the validation phrases
and, given an :class:`AliasRetrieval` (aliases held out of training), alias -> title
retrieval among the candidate titles with the model's ``encode()``: top-1 and MRR.

Reproducible: batch i of epoch e is a pure function of (seed, e, i) (its own RNG), the
model's dropout draws from the global torch RNG, which checkpoints save, so a run resumed
from a checkpoint takes exactly the steps the uninterrupted run would have.

Tokenisation happens outside the step, in DataLoader workers on a GPU (pinned memory,
non-blocking copies); the step sees tensors only. bf16 autocast on CUDA (``bf16``) and on a
CPU with bf16 instructions (``cpu_bf16``), else fp32.

Checkpoints (``checkpoint_dir/step-NNNNNNN/``, :mod:`pearl_model.training.checkpoints`) are
safetensors + JSON only: model, Adam state, RNG states, step and history; the last two
are kept. A NaN or
inf loss stops the run before the optimiser step, with :class:`NonFiniteLoss` naming the
last good checkpoint.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from pearl_model.evaluation.alias_retrieval import AliasRetrieval, alias_retrieval
from pearl_model.inference.encoder import mask_read_skipped, mean_pool
from pearl_model.inference.model import Batcher, PearlModel
from pearl_model.inference.model_dirs import open_model
from pearl_model.pairs.augment import CHAR_OPS, augment, can_change
from pearl_model.phrases.labels import LABELS, OTHER
from pearl_model.phrases.senses import NOUN_SENSES
from pearl_model.training import char_encoder as chars
from pearl_model.training.checkpoints import (DamagedCheckpoint, latest_checkpoint, load_checkpoint,
                                              load_selected_state, load_selection, save_checkpoint, save_selection)
from pearl_model.training.config import TrainConfig
from pearl_model.training.selection import rank

log = logging.getLogger(__name__)

_EVAL_EPOCH = 999_983  # the batch plan of validation: fixed, apart from any training epoch


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or inf; the parameters are those of the last good step."""


# --- data ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Example:
    phrase: str
    label_id: int
    cached: dict[str, tuple[str, ...]] = field(default_factory=dict)  # kind -> positives
    negatives: tuple[str, ...] = ()
    sense_id: int = -1  # pearl_model.phrases.senses: the head noun's supersense (-1: none)


def examples_from_rows(rows: Iterable[dict], counts: Counter | None = None,
                       sense_of: Callable[[str, int], int] | None = None) -> list[Example]:
    """Training-set rows (phrase, label_id, positives [{kind, text}], negatives) -> Examples.

    Blank positives, positives equal to their phrase and blank negatives are dropped;
    ``counts`` (if given) receives how many of each were read and dropped. ``sense_of``
    (phrase, label id -> sense id or -1) labels the examples for the sense head.
    """
    counts = Counter() if counts is None else counts
    for key in ("positives_read", "positives_dropped_blank_or_same", "negatives_read", "negatives_dropped_blank"):
        counts[key] += 0  # present even when nothing is dropped
    out = []
    for r in rows:
        cached: dict[str, list[str]] = {}
        for p in r.get("positives") or ():
            counts["positives_read"] += 1
            if p["text"] and p["text"].strip() and p["text"] != r["phrase"]:
                cached.setdefault(p["kind"], []).append(p["text"])
            else:
                counts["positives_dropped_blank_or_same"] += 1
        raw_negs = list(r.get("negatives") or ())
        negs = tuple(n for n in raw_negs if n and n.strip())
        counts["negatives_read"] += len(raw_negs)
        counts["negatives_dropped_blank"] += len(raw_negs) - len(negs)
        sense = sense_of(r["phrase"], int(r["label_id"])) if sense_of is not None else -1
        if sense >= 0:
            counts["sense_labelled"] += 1
        out.append(Example(r["phrase"], int(r["label_id"]), {k: tuple(v) for k, v in cached.items()}, negs, sense))
    return out


ON_THE_FLY_KINDS = ("char", "swap_tokens", "change_case")


def positive_kinds(ex: Example, allowed: Sequence[str] | None = None) -> list[str]:
    kinds = [k for k in ON_THE_FLY_KINDS if _on_the_fly_applies(ex.phrase, k)] + sorted(ex.cached)
    return kinds if allowed is None else [k for k in kinds if k in allowed]


def check_positive_kinds(allowed: Sequence[str] | None, examples: Sequence[Example]) -> None:
    """A kind no training phrase has is a typo or a kind the corpus lacks: refused, not ignored."""
    if allowed is None:
        return
    present = set(ON_THE_FLY_KINDS) | {k for e in examples for k in e.cached}
    unknown = sorted(set(allowed) - present)
    if unknown:
        raise ValueError(f"positive_kinds names {unknown}, which no training phrase has; "
                         f"kinds present: {sorted(present)}")


def _on_the_fly_applies(phrase: str, kind: str) -> bool:
    if kind == "char":
        return any(can_change(phrase, op) for op in CHAR_OPS)
    return can_change(phrase, kind)


def draw_positive(ex: Example, rng: random.Random, allowed: Sequence[str] | None = None) -> tuple[str, str]:
    """(kind, text): one kind uniformly among those that apply (and are allowed), then one of its texts."""
    kinds = positive_kinds(ex, allowed)
    if not kinds:
        return "identity", ex.phrase
    kind = rng.choice(kinds)
    if kind == "char":
        op = rng.choice([op for op in sorted(CHAR_OPS) if can_change(ex.phrase, op)])
        return kind, augment(ex.phrase, op, rng)
    if kind in ON_THE_FLY_KINDS:
        return kind, augment(ex.phrase, kind, rng)
    return kind, rng.choice(ex.cached[kind])


def plan_epoch(lengths: Sequence[int], batch_size: int, seed: int, epoch: int, window: int) -> list[np.ndarray]:
    """Batches of example indices: shuffled, length-sorted within windows, batch order shuffled.

    Sorting inside windows of ``window`` batches keeps padding low while each batch still
    mixes phrases from across the corpus. A last batch of a single anchor is dropped.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    lengths = np.asarray(lengths)
    batches = []
    span = batch_size * max(1, window)
    for start in range(0, len(order), span):
        chunk = order[start:start + span]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    batches = [b for b in batches if len(b) >= 2]
    return [batches[i] for i in rng.permutation(len(batches))]


class StepBatches(torch.utils.data.Dataset):
    """Map-style: item i is the whole tokenised batch i of one epoch (collated in the worker).

    Phrases and positives are tokenised as separate groups (``groups``: anchors + negatives,
    then positives), each padded to its own longest sequence: a context positive is ~4x an
    anchor's tokens, and one tensor padded to it made every anchor and negative pay for it
    (:func:`forward_groups`). Anchors and negatives share a group: they are phrases of like
    length, and on CPU a third, smaller forward cost more than the padding it saved."""

    def __init__(self, examples: Sequence[Example], plan: list[np.ndarray], batcher, seed: int, epoch: int,
                 hard_negatives: int, kinds: Sequence[str] | None = None):
        self.examples, self.plan, self.batcher = examples, plan, batcher
        self.seed, self.epoch, self.k, self.kinds = seed, epoch, hard_negatives, kinds

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, i: int) -> dict:
        rng = random.Random(f"{self.seed}/{self.epoch}/{i}")  # str seeds hash deterministically
        exs = [self.examples[j] for j in self.plan[i]]
        anchors = [e.phrase for e in exs]
        positives, kinds = [], []
        for e in exs:
            kind, text = draw_positive(e, rng, self.kinds)
            positives.append(text)
            kinds.append(kind)
        negatives = []
        for e in exs:
            negs = list(e.negatives)
            negatives += negs if len(negs) <= self.k else rng.sample(negs, self.k)
        batch = {"groups": [self.batcher(anchors + negatives), self.batcher(positives)]}
        batch["labels"] = torch.tensor([e.label_id for e in exs], dtype=torch.long)
        batch["senses"] = torch.tensor([e.sense_id for e in exs], dtype=torch.long)
        batch["kinds"] = kinds
        return batch


# --- loss -----------------------------------------------------------------------------

def pearl_loss(emb: torch.Tensor, type_logits: torch.Tensor, labels: torch.Tensor, temperature: float,
               type_loss_weight: float, type_loss_on: str = "anchors", type_loss_labels: str = "all"
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """InfoNCE of anchors vs (positives ++ negatives) + weighted type cross entropy.

    ``emb`` rows: B anchors, B positives (row B+i belongs to anchor i), then negatives.
    ``type_loss_on="both"``: the positives carry their anchor's type too (the authors' code).
    ``type_loss_labels="entities"``: only phrases with an entity type count in the cross entropy.
    Why: the *-OTHER labels put chemicals, diseases and most common nouns in one class, and the
    head then pulls them together (BC5CDR's chemical/disease split is lost); the entity types
    (PERSON, ORG, GPE, ...) are what CoNLL's clusters are made of.
    """
    b = labels.shape[0]
    emb = F.normalize(emb.float(), dim=-1)
    logits = emb[:b] @ emb[b:].T / temperature
    target = torch.arange(b, device=emb.device)
    nce = F.cross_entropy(logits, target)
    typed = 2 * b if type_loss_on == "both" else b
    targets = labels.repeat(typed // b)
    if type_loss_labels == "entities":
        targets = targets.masked_fill(torch.isin(targets, _other_ids(targets.device)), -100)
    # the mean over the counted rows, written out: cross entropy's own mean over no row is NaN, and
    # asking the host whether a row counts would stall a GPU every step. A batch without an entity
    # phrase has no term (0, and no gradient).
    counted = targets != -100
    ce = F.cross_entropy(type_logits[:typed].float(), targets, ignore_index=-100, reduction="sum") \
        / counted.sum().clamp(min=1)
    with torch.no_grad():
        parts = {"infonce": nce.detach(), "type_ce": ce.detach(),
                 "type_acc": (type_logits[:b].argmax(-1) == labels).float().mean(),
                 "retrieval_acc": (logits.argmax(-1) == target).float().mean()}
    return nce + type_loss_weight * ce, parts


def sense_loss(head: torch.nn.Module, anchors: torch.Tensor, senses: torch.Tensor
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Cross entropy of the sense head over the anchors that have a sense (-1: none; no term without one)."""
    known = senses >= 0
    if not bool(known.any()):
        return anchors.sum() * 0.0, {}
    logits = head(anchors[known].float())
    ce = F.cross_entropy(logits, senses[known])
    return ce, {"sense_ce": ce.detach(), "sense_acc": (logits.argmax(-1) == senses[known]).float().mean()}


def attach_sense_head(model, cfg: TrainConfig, device: torch.device) -> None:
    """A training-only linear head over the model's vector (as the type head reads it) for the
    WordNet supersenses; seeded apart from the global RNG (dropout's), removed when training ends."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model.sense_head = torch.nn.Linear(model.dim, len(NOUN_SENSES)).to(device)


_OTHER_IDS: dict[torch.device, torch.Tensor] = {}


def _other_ids(device) -> torch.Tensor:
    """The *-OTHER label ids on ``device``, copied there once (a copy each step would wait on the GPU)."""
    device = torch.device(device)
    if device not in _OTHER_IDS:
        _OTHER_IDS[device] = torch.tensor([i for i, lab in enumerate(LABELS) if lab.endswith(f"-{OTHER}")],
                                          device=device)
    return _OTHER_IDS[device]


def distill_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL of each anchor's softmax over its cosines to the other anchors: the frozen original
    backbone's (``teacher``) against the fine-tuned one's (``student``, the backbone part of the
    vector).

    Why: InfoNCE pushes every other phrase of the batch away alike, and with positives that
    are mostly surface edits nothing holds the backbone's coarse semantic layout (chemicals
    apart from diseases) in place; it eroded with every anchor seen
    (docs/research/recipe-anchors-and-char-scale.md). This term keeps the relative layout of the
    anchors and leaves the positives free to move."""
    b = student.shape[0]
    off = ~torch.eye(b, dtype=torch.bool, device=student.device)
    s = F.normalize(student.float(), dim=-1)
    t = F.normalize(teacher.float(), dim=-1)
    log_q = F.log_softmax((s @ s.T / temperature)[off].view(b, b - 1), dim=-1)
    p = F.softmax((t @ t.T / temperature)[off].view(b, b - 1), dim=-1)
    return F.kl_div(log_q, p, reduction="batchmean")


def vector_distill_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean (1 - cosine) of each anchor's vector (the backbone part) to the frozen original
    backbone's vector of the same anchor.

    Why, beside :func:`distill_loss`: the layout term leaves a batch free to rotate as a whole,
    and BC5CDR's chemical/disease direction went with such drifts; pinning each anchor keeps the
    backbone's directions while the positives (not pinned) learn to land on them."""
    if student.shape[0] == 0:
        return student.sum() * 0.0
    return (1 - F.cosine_similarity(student.float(), teacher.float(), dim=-1)).mean()


def norm_distill_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean squared log ratio of each anchor's norm (the backbone part) to the original backbone's.

    Why: InfoNCE reads cosines only and the direction pin leaves norms free, but KMeans reads
    raw vectors. Trained checkpoints on the wrong BC5CDR split (NMI ~45) were on the right one
    (65-68) with their own directions at the backbone's norms: norms that shrank ~1% more for
    short names than for long ones (they vary by only ~2.5%) decided the near tie. Pinning them
    did not keep the split (the directions took the other one), but helped CoNLL-dev and the
    held-out aliases (docs/research/recipe-norms-and-supersenses.md); off by default."""
    if student.shape[0] == 0:
        return student.sum() * 0.0
    ratio = student.float().norm(dim=-1).clamp_min(1e-12) / teacher.float().norm(dim=-1).clamp_min(1e-12)
    return torch.log(ratio).pow(2).mean()


def distill_term(student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor, cfg: TrainConfig
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The configured distillation terms, weighted, over the anchors they apply to
    (``cfg.distill_labels``), and their unweighted values for the log."""
    if cfg.distill_labels == "other":
        keep = torch.isin(labels, _other_ids(labels.device))
        student, teacher = student[keep], teacher[keep]
    if cfg.distill_target == "vectors":
        d = vector_distill_loss(student, teacher)
    elif student.shape[0] < 3:  # a softmax over fewer than 2 others says nothing
        d = student.sum() * 0.0
    else:
        d = distill_loss(student, teacher, cfg.distill_temperature)
    total, parts = cfg.distill_weight * d, {"distill": d.detach()}
    if cfg.distill_norm_weight > 0:
        n = norm_distill_loss(student, teacher)
        total, parts["distill_norm"] = total + cfg.distill_norm_weight * n, n.detach()
    return total, parts


def frozen_teacher(model, reference: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A frozen copy of ``model``'s backbone holding the ``reference`` (original) weights."""
    teacher = copy.deepcopy(model.backbone)
    teacher.load_state_dict(reference)
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def freeze(backbone, embeddings: bool, layers: int | None) -> int:
    """Keep the embedding matrix and/or the lowest ``layers`` transformer layers as they are
    (BERT-like backbones: ``embeddings``, ``encoder.layer``; ``layers`` None: the lower half,
    rounded down); named in the error otherwise. Returns the number of layers frozen."""
    if not embeddings and layers == 0:
        return 0
    blocks = getattr(getattr(backbone, "encoder", None), "layer", None)
    if (embeddings and not hasattr(backbone, "embeddings")) or (layers != 0 and blocks is None):
        raise ValueError(f"freeze_embeddings/freeze_layers: {type(backbone).__name__} has no BERT-like "
                         "`embeddings` / `encoder.layer` to freeze")
    if layers is None:
        layers = len(blocks) // 2
    if layers > len(blocks or ()):
        raise ValueError(f"freeze_layers is {layers}, but the backbone has {len(blocks)} layers")
    for module in ([backbone.embeddings] if embeddings else []) + list(blocks or ())[:layers]:
        for p in module.parameters():
            p.requires_grad_(False)
    return layers


def lr_at(step: int, cfg: TrainConfig) -> float:
    return cfg.lr * cfg.lr_decay ** (step // cfg.lr_decay_every)


# --- the loop ---------------------------------------------------------------------------

@dataclass
class TrainResult:
    steps: int
    history: list[dict]            # one record per log interval
    validation: list[dict]         # before training (step 0), then after each epoch (a resumed run's included)
    resumed_from: int | None
    seconds: float                 # wall time, validation included
    anchors_per_s: float           # over the training steps (checkpoint writes included, validation not)
    peak_memory_mb: float | None   # CUDA peak allocated
    checkpoint: str | None
    positive_kinds: dict[str, int] = field(default_factory=dict)  # kinds drawn (this run's steps; sums to anchors)
    selection: list[dict] = field(default_factory=list)  # select(model) at each selection point (a resumed run's too)
    selected_step: int | None = None  # the step whose weights the model holds after a selecting run

    @property
    def kept(self) -> dict:
        """The selection record of the step the model holds ({} when the run did not select)."""
        return next((r for r in self.selection if r["step"] == self.selected_step), {})


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} asked for, but CUDA is not available here (use device='cpu')")
    return dev


def autocast_bf16(device: torch.device, cfg: TrainConfig) -> bool:
    """Whether the forward runs under bf16 autocast: on CUDA by ``cfg.bf16``; on a CPU by
    ``cfg.cpu_bf16``, and only where the CPU has bf16 instructions (elsewhere oneDNN emulates
    them, slower than fp32). The loss terms are computed in float32 either way."""
    if device.type == "cuda":
        return cfg.bf16
    return device.type == "cpu" and cfg.cpu_bf16 and cpu_has_bf16()


def cpu_has_bf16() -> bool:
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


# ops that make the host wait for a GPU: a tensor read as a Python value (.item(), float(), bool(),
# .tolist() end in _local_scalar_dense) and shapes that depend on the data (boolean indexing ends in
# nonzero). On a CPU they cost nothing, so a CPU profile counts them by name: the same count as on a GPU.
HOST_READ_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::_unique2",
                 "aten::unique_consecutive", "aten::unique_dim")


def device_masks(device: torch.device):
    """Around the training step's forwards: on a GPU the attention masks stay on the device
    (:func:`~pearl_model.inference.encoder.mask_read_skipped`, the same attention); on a CPU the
    forwards run as they are (a host read costs nothing there)."""
    return mask_read_skipped() if device.type == "cuda" else contextlib.nullcontext()


def _to(features: dict, device: torch.device) -> dict:
    keys = ("input_ids", "attention_mask", "char_ids", "word_mask")
    return {k: features[k].to(device, non_blocking=True) for k in keys}


def forward_groups(model, batch: dict, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(embeddings, type logits) of a :class:`StepBatches` batch, rows in the order anchors,
    positives, negatives (what :func:`pearl_loss` reads), and the anchors' features (the
    distillation teacher's input). Each group runs padded to its own length; the model's outputs
    are per phrase, so this equals one padded forward up to float rounding."""
    phrases, positives = (_to(g, device) for g in batch["groups"])
    b = len(batch["labels"])
    (pe, pt), (qe, qt) = model(**phrases), model(**positives)
    anchors = {k: v[:b] for k, v in phrases.items()}
    return torch.cat([pe[:b], qe, pe[b:]]), torch.cat([pt[:b], qt, pt[b:]]), anchors


def _whole_batch(batch: dict) -> dict:
    return batch


def loader_workers(cfg: TrainConfig, device: torch.device) -> int:
    """``cfg.num_workers``, else 4 on a GPU (a worker assembles a batch of 512 anchors in well under a
    tenth of a CPU second: `train_profile_cpu.json`), none on a CPU, where the step is the bottleneck."""
    if cfg.num_workers is not None:
        return cfg.num_workers
    return 4 if device.type == "cuda" else 0


def _loader(ds: StepBatches, cfg: TrainConfig, device: torch.device, start: int):
    workers = loader_workers(cfg, device)
    if workers:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # forked workers tokenise on their own
    # The sampler starts at the resume point; a private generator keeps the loader from
    # drawing on the global torch RNG (dropout's), so resumed runs stay exact.
    return torch.utils.data.DataLoader(
        ds, batch_size=None, sampler=range(start, len(ds)), num_workers=workers,
        pin_memory=device.type == "cuda", persistent_workers=False,
        generator=torch.Generator().manual_seed(cfg.seed), collate_fn=_whole_batch,
        prefetch_factor=4 if workers else None)


def train(model, examples: Sequence[Example], cfg: TrainConfig, *, validation: Sequence[Example] = (),
          retrieval: AliasRetrieval | None = None, checkpoint_dir: str | Path | None = None, resume: bool = True,
          on_log: Callable[[dict], None] | None = None,
          reference: dict[str, torch.Tensor] | None = None,
          select: Callable[[torch.nn.Module], dict] | None = None,
          on_step: Callable[[int], None] | None = None) -> TrainResult:
    """Train ``model`` (a :class:`~pearl_model.inference.model.PearlModel` with a batcher) in place.

    ``reference``: the backbone's original weights (:func:`backbone_state` before training),
    needed by ``cfg.distill_weight`` > 0 (the teacher of :func:`distill_loss`).

    At the validation points the records get the validation loss terms (``validation``) and
    the held-out alias retrieval scores (``retrieval``: ``val_alias_top1``, ``val_alias_mrr``).

    ``select`` (with ``cfg.select_every``): called every ``select_every`` steps and at the end;
    it returns scores with ``select_worst`` and ``select_mean`` (:func:`pearl_model.training.selection.dev_selector`),
    and the model ends holding the weights of the step ranked best by ``cfg.select_rule``
    (:func:`pearl_model.training.selection.rank`). The
    chosen weights survive an interruption (``selected.safetensors`` in ``checkpoint_dir``).

    ``on_step``: called with the step's number after each optimiser step (a profiler's step marker)."""
    if model.batcher is None:
        raise ValueError("the model needs a batcher (tokenizer + char vocabulary) to train")
    if len(examples) < 2:
        raise ValueError(f"need at least 2 training phrases, got {len(examples)}")
    check_positive_kinds(cfg.positive_kinds, examples)
    if cfg.distill_weight > 0 and reference is None:
        raise ValueError("distill_weight > 0 needs the backbone's original weights: train(..., reference=...)")
    if cfg.sense_loss_weight > 0 and not any(e.sense_id >= 0 for e in examples):
        raise ValueError("sense_loss_weight > 0 but no training phrase has a noun sense "
                         "(label the examples: examples_from_rows(..., sense_of=...))")
    device = resolve_device(cfg.device)
    batcher = model.batcher
    if cfg.max_length is not None:
        batcher = Batcher(batcher.tokenizer, batcher.char_vocab, batcher.prefix, cfg.max_length,
                          batcher.max_words, batcher.max_chars)
    model.to(device).train()
    teacher = frozen_teacher(model, reference).to(device) if cfg.distill_weight > 0 else None
    freeze(model.backbone, cfg.freeze_embeddings, cfg.freeze_layers)
    if cfg.torch_compile != "off":  # in place: the weights keep their names (checkpoints, export)
        for module in (model.backbone, teacher):
            if module is not None:
                module.compile(mode=cfg.torch_compile, dynamic=True)
    if cfg.sense_loss_weight > 0:
        attach_sense_head(model, cfg, device)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    lengths = [len(e.phrase) for e in examples]
    plans = [plan_epoch(lengths, cfg.batch_size, cfg.seed, e, cfg.bucket_window) for e in range(cfg.epochs)]
    total = sum(len(p) for p in plans)
    if cfg.max_steps is not None:
        total = min(total, cfg.max_steps)

    step, history, validation_records, resumed_from = 0, [], [], None
    ckpt = latest_checkpoint(checkpoint_dir) if resume else None
    if ckpt is not None:
        try:
            step, history, validation_records = load_checkpoint(ckpt, model, opt)
        except DamagedCheckpoint as e:  # a cache of the run: trained again, never loaded
            log.warning("%s: training from the start", e)
            ckpt = None
        else:
            resumed_from = step
            log.info("resumed from %s (step %d of %d)", ckpt, step, total)
    last_good = str(ckpt) if ckpt else None
    use_bf16 = autocast_bf16(device, cfg)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def validate(epoch: int) -> dict:
        rec = {"epoch": epoch, "step": step}
        if validation:
            rec |= evaluate_loss(model, validation, cfg, batcher, device)
        if retrieval is not None:
            scores = alias_retrieval(lambda xs: model.encode(xs, batch_size=max(cfg.batch_size, 64)), retrieval)
            rec |= {f"val_{k}": v for k, v in scores.items()}
            log.info("held-out alias retrieval at step %d: %s", step, scores)
        return rec

    checks = bool(validation) or retrieval is not None
    selecting = select is not None and cfg.select_every > 0
    selection = load_selection(checkpoint_dir) if selecting and resumed_from is not None else []
    def _rank(rec: dict) -> tuple:
        # ties go to the earlier step: closer to the backbone
        return *rank(rec, cfg.select_rule), -rec["step"]

    def choose(epoch: int) -> float:
        """Score this step for selection; keep its weights when it is the best so far. Returns seconds."""
        t0 = time.perf_counter()
        rec = {"epoch": epoch, "step": step, **select(model)}
        best = max(selection, key=_rank, default=None)
        selection.append(rec)
        if best is None or _rank(rec) > _rank(best):
            best_state.clear()
            best_state.update({k: v.detach().cpu().clone() for k, v in model.state_dict().items()})
            save_selection(checkpoint_dir, best_state, step)
        save_selection(checkpoint_dir, None, None, selection)
        log.info("dev selection at step %d: worst change %+.2f, mean %+.2f (best so far: step %d); scores %s", step,
                 rec["select_worst"], rec["select_mean"], max(selection, key=_rank)["step"],
                 {k.removeprefix("dev_"): round(v, 2) for k, v in rec.items()
                  if k.startswith("dev_") and "/" not in k and not k.endswith("_mrr")})
        if on_log:
            on_log({"step": step, **{k: v for k, v in rec.items() if k.startswith("select_")}})
        return time.perf_counter() - t0

    best_state: dict[str, torch.Tensor] = load_selected_state(checkpoint_dir) if selection else {}
    t_start = time.perf_counter()
    trained_anchors, val_seconds, kinds_drawn = 0, 0.0, Counter()
    if checks and resumed_from is None:  # the starting point, for the curves
        validation_records.append(validate(-1))
        val_seconds = time.perf_counter() - t_start
    window_t, window_anchors, window_loss = time.perf_counter(), 0, []
    epoch_starts = np.cumsum([0] + [len(p) for p in plans])
    for epoch in range(cfg.epochs):
        first, last = int(epoch_starts[epoch]), int(epoch_starts[epoch + 1])
        if step >= last or step >= total:
            continue
        ds = StepBatches(examples, plans[epoch], batcher, cfg.seed, epoch, cfg.hard_negatives, cfg.positive_kinds)
        for batch in _loader(ds, cfg, device, step - first):
            if step >= total:
                break
            for g in opt.param_groups:
                g["lr"] = lr_at(step, cfg)
            labels = batch["labels"].to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16), device_masks(device):
                emb, logits, anchors = forward_groups(model, batch, device)
            loss, parts = pearl_loss(emb, logits, labels, cfg.temperature, cfg.type_loss_weight, cfg.type_loss_on,
                                     cfg.type_loss_labels)
            if teacher is not None:
                b = labels.shape[0]
                with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16), \
                        device_masks(device):
                    t = mean_pool(teacher(input_ids=anchors["input_ids"],
                                          attention_mask=anchors["attention_mask"]).last_hidden_state,
                                  anchors["attention_mask"])
                d, distill_parts = distill_term(emb[:b, :model.backbone_dim], t, labels, cfg)
                loss = loss + d
                parts |= distill_parts
            if cfg.sense_loss_weight > 0:
                b = labels.shape[0]
                ce, sense_parts = sense_loss(model.sense_head, model.head_input(emb[:b]), batch["senses"].to(device))
                loss = loss + cfg.sense_loss_weight * ce
                parts |= sense_parts
            opt.zero_grad(set_to_none=True)
            loss.backward()
            # the step's one read on the host, after the backward is queued: the GPU has it to run
            # meanwhile (read before the backward, the GPU would wait for the host to queue it)
            if not torch.isfinite(loss):
                raise NonFiniteLoss(f"loss is {loss.item()} at step {step} (epoch {epoch}); the run stopped "
                                    f"before updating the weights. Last good checkpoint: {last_good or 'none'}")
            opt.step()
            if on_step:
                on_step(step + 1)
            step += 1
            n = labels.shape[0]
            trained_anchors += n
            kinds_drawn.update(batch["kinds"])
            window_anchors += n
            window_loss.append(parts | {"loss": loss.detach()})
            if step % cfg.log_every == 0 or step == total:
                # a batch without a sensed anchor has no sense terms: each key over the steps that have it
                keys = list(dict.fromkeys(k for w in window_loss for k in w))
                # one copy to the host for the whole window (a read per value would wait on the GPU each time)
                means = dict(zip(keys, torch.stack([torch.stack([w[k] for w in window_loss if k in w]).mean()
                                                    for k in keys]).tolist()))
                now = time.perf_counter()
                rec = {"step": step, "epoch": epoch, "lr": lr_at(step - 1, cfg), **means,
                       "anchors": window_anchors, "anchors_per_s": window_anchors / max(now - window_t, 1e-9),
                       "elapsed_s": now - t_start,
                       "total_steps": total}
                history.append(rec)
                window_t, window_anchors, window_loss = now, 0, []
                log.info("step %d/%d loss %.4f (nce %.4f, type %.4f) lr %.2e %.0f anchors/s", step, total,
                         rec["loss"], rec["infonce"], rec["type_ce"], rec["lr"], rec["anchors_per_s"])
                if on_log:
                    on_log(rec)
            if selecting and (step % cfg.select_every == 0 or step == total) \
                    and not any(r["step"] == step for r in selection):
                took = choose(epoch)
                val_seconds += took
                window_t += took
            if checkpoint_dir is not None and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                last_good = str(save_checkpoint(checkpoint_dir, model, opt, step, history, cfg, cfg.keep_checkpoints,
                                                validation_records))
        if checks and step >= min(last, total) and not any(v["step"] == step for v in validation_records):
            t_val = time.perf_counter()
            validation_records.append(validate(epoch))
            val_seconds += time.perf_counter() - t_val
            window_t += time.perf_counter() - t_val  # the next throughput window excludes validation
    if checkpoint_dir is not None and (not last_good or not last_good.endswith(f"step-{step:07d}")):
        last_good = str(save_checkpoint(checkpoint_dir, model, opt, step, history, cfg, cfg.keep_checkpoints,
                                        validation_records))
    selected = None
    if selecting and selection:
        selected = max(selection, key=_rank)["step"]
        if selected != step:  # the last checkpoint (saved above) stays the resume point
            model.load_state_dict({k: v.to(device) for k, v in best_state.items()})
        log.info("kept the weights of step %d of %d (dev worst change %+.2f)", selected, step,
                 max(selection, key=_rank)["select_worst"])
    if cfg.sense_loss_weight > 0:
        del model.sense_head  # a training aid: exports and state dicts stay as without it
    seconds = time.perf_counter() - t_start
    train_seconds = seconds - val_seconds
    model.eval()
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return TrainResult(step, history, validation_records, resumed_from, seconds,
                       trained_anchors / train_seconds if train_seconds > 0 else 0.0, peak, last_good,
                       dict(kinds_drawn), selection, selected)


@torch.no_grad()
def evaluate_loss(model, examples: Sequence[Example], cfg: TrainConfig, batcher=None,
                  device: torch.device | None = None) -> dict:
    """Mean loss terms over ``examples`` (fixed positives, seed-independent of training), no dropout."""
    if len(examples) < 2:
        return {}
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    plan = plan_epoch([len(e.phrase) for e in examples], cfg.batch_size, cfg.seed, _EVAL_EPOCH, cfg.bucket_window)
    ds = StepBatches(examples, plan, batcher or model.batcher, cfg.seed, _EVAL_EPOCH, cfg.hard_negatives,
                     cfg.positive_kinds)
    sums: dict[str, float] = {}
    weight = 0
    for i in range(len(ds)):
        batch = ds[i]
        labels = batch["labels"].to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast_bf16(device, cfg)):
            emb, logits, _ = forward_groups(model, batch, device)
        loss, parts = pearl_loss(emb, logits, labels, cfg.temperature, cfg.type_loss_weight, cfg.type_loss_on,
                                     cfg.type_loss_labels)
        n = labels.shape[0]
        for k, v in (parts | {"loss": loss}).items():
            sums[k] = sums.get(k, 0.0) + float(v) * n
        weight += n
    model.train(was_training)
    return {f"val_{k}": v / weight for k, v in sums.items()}


def backbone_state(model) -> dict[str, torch.Tensor]:
    """A CPU copy of the backbone's weights (the 'original' side of weight averaging)."""
    return {k: v.detach().cpu().clone() for k, v in model.backbone.state_dict().items()}


def finite_history(history: list[dict]) -> bool:
    return all(math.isfinite(r["loss"]) for r in history)


def build_model(backbone: str, char_encoder_dir: str | Path, *, char_proj_dim: int = 96, seed: int = 0,
                device: str = "auto", cache_dir: str | None = None, type_input: str = "raw"):
    """A fresh PEARL model: the backbone spec's encoder + a saved character encoder, new layers seeded."""
    dev = resolve_device(device)
    enc = open_model(backbone, backbone=True, cache_dir=cache_dir, device=str(dev))
    char_model, vocab = chars.load(char_encoder_dir, device=dev)
    with torch.random.fork_rng(devices=[]):  # seeded init of the new layers, global RNG untouched
        torch.manual_seed(seed)
        model = PearlModel.from_parts(enc, char_model, char_proj_dim=char_proj_dim, char_vocab=vocab,
                                      type_input=type_input)
    return model.to(dev)
