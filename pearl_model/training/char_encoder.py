"""LOVE-style character encoder: reads a word's characters, imitates a static word-vector matrix.

PEARL (after LOVE, Chen et al. 2022) gives every word, misspelled or out of vocabulary, a
vector by running a small character model trained to reproduce pre-trained word vectors
(GloVe, fastText). Training is contrastive: for a batch of words (each possibly edited by a
character operator of :mod:`pearl_model.pairs.augment`), the L2-normalised output of word *i*
must score highest against the normalised target vector of word *i* among the targets of
the batch (InfoNCE with a temperature). An optional cosine term ``cos_weight * (1 - cos)``
pulls each output toward its own target directly (off by default: InfoNCE alone already
aligns directions; the term helps when batches are tiny).

Encoder choice: a small CNN (several kernel widths, max-pool over positions), not a BiLSTM.
Max-pooled n-gram detectors are position-invariant, so a typo only disturbs the few
n-grams that cover it while the rest of the word still fires the same filters: that is the
robustness to misspellings LOVE is after, with an attention-free model that is fast on CPU.

Only the direction of the output is trained (the loss normalises it), so the word vector
of the model is its L2-normalised output; a phrase vector is the mean of the unit word
vectors of its lowercased whitespace tokens, computed phrase by phrase.

Weights are saved with safetensors and the configuration (characters, dims) as JSON;
loading never unpickles anything.
"""
from __future__ import annotations

import logging
import random
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from pearl_model.inference.network import BOW, EOW, PAD, UNK, CharEncoder, CharVocab  # noqa: F401
from pearl_model.inference.network import check_words as _check_words
from pearl_model.inference.network import load_char_encoder, save_char_encoder
from pearl_model.pairs.augment import CHAR_OPS, augment

__all__ = [
    "CharVocab", "CharEncoder", "train_char_encoder", "word_vectors", "phrase_vector",
    "phrase_vectors", "heldout_cosine", "misspelling_rank", "rank_summary", "save", "load",
]

log = logging.getLogger(__name__)

# the weights' format lives beside the network it builds (every export ships that file)
save, load = save_char_encoder, load_char_encoder


def _check_vectors(words: list[str], vectors: object) -> np.ndarray:
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise ValueError(f"vectors must be a 2-D (n_words, dim) array, got shape {arr.shape}")
    if arr.shape[0] != len(words):
        raise ValueError(f"{len(words)} words but {arr.shape[0]} vectors")
    if not np.isfinite(arr).all():
        raise ValueError("vectors contain NaN or inf")
    if (np.linalg.norm(arr, axis=1) == 0).any():
        raise ValueError("vectors contain all-zero rows (no direction to learn)")
    return arr


def _augment_batch(words: list[str], rng: random.Random, prob: float) -> list[str]:
    kinds = sorted(CHAR_OPS)
    out = []
    for w in words:
        if rng.random() < prob:
            w = augment(w, rng.choice(kinds), rng)
        out.append(w)
    return out


def train_char_encoder(words: Sequence[str], vectors: np.ndarray, *, epochs: int = 10,
                       batch_size: int = 64, lr: float = 2e-3, temperature: float = 0.07,
                       augment_prob: float = 0.5, cos_weight: float = 0.0, seed: int = 0,
                       device: str | torch.device = "cpu", log_every: int = 0,
                       max_len: int = 20, **model_kwargs) -> tuple[CharEncoder, CharVocab, list[float]]:
    """Train a :class:`CharEncoder` so that ``model(word)`` points like ``vectors[word]``.

    Loss per batch: InfoNCE(normalised outputs, normalised batch targets, temperature)
    + ``cos_weight`` * mean(1 - cos(output_i, target_i)). Words are shuffled each epoch
    (numpy generator seeded with ``seed``) and each word is replaced, with probability
    ``augment_prob``, by one edit of a character operator drawn uniformly
    (``random.Random(seed)``). Batches of one word are dropped (no negatives).
    Returns ``(model in eval mode, vocab, history)``, history the mean loss of each epoch.
    """
    words = _check_words(words)
    if not words:
        raise ValueError("cannot train on an empty word list")
    arr = _check_vectors(words, vectors)
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be an int >= 1, got {epochs!r}")
    if not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"batch_size must be an int >= 2 (InfoNCE needs negatives), got {batch_size!r}")
    if len(words) < 2:
        raise ValueError("need at least 2 words (InfoNCE needs negatives)")
    if not temperature > 0 or not lr > 0 or not 0.0 <= augment_prob <= 1.0 or cos_weight < 0:
        raise ValueError("need temperature > 0, lr > 0, 0 <= augment_prob <= 1, cos_weight >= 0")

    vocab = CharVocab.build(words)
    device = torch.device(device)
    with torch.random.fork_rng(devices=[]):  # seeded init without touching the global RNG
        torch.manual_seed(seed)
        model = CharEncoder(len(vocab), arr.shape[1], max_len=max_len, **model_kwargs)
    model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    targets = F.normalize(torch.from_numpy(arr), dim=1).to(device)
    order_rng, aug_rng = np.random.default_rng(seed), random.Random(seed)
    history: list[float] = []
    for epoch in range(epochs):
        order = order_rng.permutation(len(words))
        total, n_batches = 0.0, 0
        for start in range(0, len(words), batch_size):
            idx = order[start:start + batch_size]
            if len(idx) < 2:
                continue
            batch = _augment_batch([words[i] for i in idx], aug_rng, augment_prob)
            out = F.normalize(model(vocab.encode(batch, max_len).to(device)), dim=1)
            tgt = targets[torch.as_tensor(idx, device=device)]
            logits = out @ tgt.T / temperature
            loss = F.cross_entropy(logits, torch.arange(len(idx), device=device))
            if cos_weight:
                loss = loss + cos_weight * (1.0 - (out * tgt).sum(dim=1)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach())
            n_batches += 1
        history.append(total / n_batches)
        if log_every and (epoch + 1) % log_every == 0:
            log.info("char encoder epoch %d/%d loss %.4f", epoch + 1, epochs, history[-1])
    model.eval()
    return model, vocab, history


@torch.no_grad()
def word_vectors(model: CharEncoder, vocab: CharVocab, words: Sequence[str],
                 normalize: bool = True) -> np.ndarray:
    """(len(words), out_dim) float32: the model's (by default L2-normalised) word vectors."""
    words = _check_words(words)
    if not words:
        return np.zeros((0, model.config["out_dim"]), dtype=np.float32)
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = model(vocab.encode(words, model.max_len).to(dev)).float()
    model.train(was_training)
    if normalize:
        out = F.normalize(out, dim=1)
    return out.cpu().numpy()


def phrase_vector(model: CharEncoder, vocab: CharVocab, phrase: str) -> np.ndarray:
    """Mean of the unit word vectors of the phrase's lowercased whitespace tokens."""
    if not isinstance(phrase, str):
        raise TypeError(f"phrase must be str, got {type(phrase).__name__}")
    tokens = phrase.lower().split()
    if not tokens:
        raise ValueError("phrase must contain at least one token")
    return word_vectors(model, vocab, tokens).mean(axis=0)


def phrase_vectors(model: CharEncoder, vocab: CharVocab, phrases: Sequence[str]) -> np.ndarray:
    """(len(phrases), out_dim): each row is ``phrase_vector`` of that phrase alone.

    All tokens are encoded in one forward pass (each word row is padded to the fixed
    ``max_len`` and the model has no cross-example ops), then averaged per phrase.
    """
    if isinstance(phrases, str) or not isinstance(phrases, Sequence):
        raise TypeError("phrases must be a list of str")
    token_lists = []
    for p in phrases:
        if not isinstance(p, str):
            raise TypeError(f"phrase must be str, got {type(p).__name__}")
        toks = p.lower().split()
        if not toks:
            raise ValueError("phrase must contain at least one token")
        token_lists.append(toks)
    flat = [t for toks in token_lists for t in toks]
    vecs = word_vectors(model, vocab, flat)
    out = np.zeros((len(token_lists), model.config["out_dim"]), dtype=np.float32)
    pos = 0
    for r, toks in enumerate(token_lists):
        out[r] = vecs[pos:pos + len(toks)].mean(axis=0)
        pos += len(toks)
    return out


def heldout_cosine(model: CharEncoder, vocab: CharVocab, words: Sequence[str],
                   vectors: np.ndarray) -> float:
    """Mean cosine between the predicted and the true vectors of (held-out) words."""
    words = _check_words(words)
    if not words:
        raise ValueError("no words to evaluate")
    true = _check_vectors(words, vectors)
    true = true / np.linalg.norm(true, axis=1, keepdims=True)
    return float((word_vectors(model, vocab, words) * true).sum(axis=1).mean())


def misspelling_rank(model: CharEncoder, vocab: CharVocab, vocab_words: Sequence[str],
                     vocab_vectors: np.ndarray, typo_pairs: Sequence[tuple[str, str]]) -> list[int]:
    """Rank (1 = best) of the true word among the cosine neighbours of each typo's vector.

    ``typo_pairs`` holds ``(misspelling, true_word)``; the true word must be in
    ``vocab_words``. Ties count against the true word (rank = 1 + #scores >= its score,
    other than itself), so a constant model cannot look good.
    """
    vocab_words = _check_words(vocab_words, "vocab_words")
    mat = _check_vectors(vocab_words, vocab_vectors)
    mat = mat / np.linalg.norm(mat, axis=1, keepdims=True)
    where = {w: i for i, w in enumerate(vocab_words)}
    typos, gold = [], []
    for pair in typo_pairs:
        typo, true = pair
        if true not in where:
            raise ValueError(f"true word {true!r} is not in vocab_words")
        typos.append(typo)
        gold.append(where[true])
    if not typos:
        return []
    scores = word_vectors(model, vocab, typos) @ mat.T  # (n_typos, n_vocab)
    ranks = []
    for r, g in enumerate(gold):
        ranks.append(int((scores[r] >= scores[r, g]).sum()))  # includes g itself
    return ranks


def rank_summary(ranks: Sequence[int], k: int = 10) -> dict[str, float]:
    """Mean reciprocal rank and hit@k of a list of ranks."""
    if not ranks:
        raise ValueError("no ranks to summarise")
    r = np.asarray(ranks, dtype=np.float64)
    return {"n": float(len(r)), "mrr": float((1.0 / r).mean()), f"hit@{k}": float((r <= k).mean())}


