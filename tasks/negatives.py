"""Stage 8: `phrases` -> `negatives`: lexically close, semantically far, as a map-reduce on Dask.

  1. embed      per phrases part: E5 vectors of its phrases -> `phrase_embeddings`; a phrase whose
                vector the previous build's `phrase_vectors` store holds (same text, same model
                files, code and libraries: storage/reuse.py) is read from it, not encoded.
  2. grams      per phrases part: q-gram counts, merged into one global rarity order
                (small: one count per distinct q-gram).
  3. block      per phrases part: each phrase under its prefix-filter blocking keys
                (`pearl_model.pairs.negatives.blocking_keys`), bucketed by key -> `negative_blocks`.
  4. candidates per block bucket: verified pairs (edit similarity >= threshold, rapidfuzz) in
                both directions, bucketed by the query's phrase bucket -> `negative_candidates`.
  5. select     per phrases bucket: each query's best `max_candidates` candidates, scored by
                E5 cosine; kept when edit_sim - minmax(cos) > margin; top k -> `negatives`.
No step holds all pairs or all vectors: each reads one bucket, and vectors are fetched by
key with a filtered scan. The theory behind steps 2-4 is in `pearl_model/pairs/negatives.py`.
Steps 2-5 are global (a phrase's candidates depend on every other phrase): they recompute from
the reused vectors.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads

from pearl_model.pairs import negatives as neg
from storage.buckets import bucket_of, buckets_for
from storage.datasets import Dataset, dataset_version
from storage.reuse import (
    Keys, ReuseStore, commit_store, content_key, item_of, keys_of, library_versions, log_plan, phrase_keys,
    plan_reuse, plan_store, reuse_part,
)
from storage.schemas import NEGATIVE_BLOCKS, NEGATIVE_CANDIDATES, NEGATIVES, PHRASE_EMBEDDINGS

CODE_VERSION = "negatives-2"  # 2: canonical batches (a vector independent of its batch)
# negative_blocks rows per phrase (sample + ovos: 635,127 / 48,399 = 13.1)
BLOCK_ROWS_PER_PHRASE = 13


def block_bucket_count(phrases: int) -> int:
    """The candidate-pair reducers for ``phrases``, when ``negative_buckets`` is unset."""
    return buckets_for(phrases, BLOCK_ROWS_PER_PHRASE)


@dataclass(frozen=True)
class NegativeOutputs:
    embeddings: Dataset
    blocks: Dataset
    candidates: Dataset
    negatives: Dataset
    vectors: ReuseStore | None = None  # each phrase's vector kept for the next build (None: nothing to embed)

    def all(self) -> tuple[Dataset, ...]:
        return (self.embeddings, self.blocks, self.candidates, self.negatives)


def plan_negatives(phrases: Dataset, params: dict) -> NegativeOutputs:
    inputs = {"phrases": phrases.version}

    def ds(name: str, schema: pa.Schema, keys: tuple[str, ...]) -> Dataset:
        sub = {k: params[k] for k in keys}  # each dataset versioned by the parameters it depends on
        return Dataset(phrases.root, name, dataset_version(name, CODE_VERSION, sub, inputs), schema)

    emb = ("backbone",)
    blk = ("threshold", "block_buckets")
    cand = blk + ("max_block", "phrase_buckets")
    return NegativeOutputs(ds("phrase_embeddings", PHRASE_EMBEDDINGS, emb), ds("negative_blocks", NEGATIVE_BLOCKS, blk),
                           ds("negative_candidates", NEGATIVE_CANDIDATES, cand),
                           ds("negatives", NEGATIVES, tuple(sorted(k for k in params if k != "cache_dir"))))


def vector_identity(params: dict) -> dict:
    """What a phrase's vector is a function of, besides its text: the model's files, the code that runs it."""
    from pearl_model.inference.loading import ENGINE_DISTRIBUTIONS, encoder_identity

    return {"stage": "phrase_embeddings", "code_version": CODE_VERSION,
            **encoder_identity(params["backbone"], params.get("cache_dir")), "normalize": True,
            "libraries": library_versions(*ENGINE_DISTRIBUTIONS)}


def plan_vector_store(phrases: Dataset, outs: NegativeOutputs, params: dict) -> NegativeOutputs:
    """The `phrase_vectors` store the embed step writes and reads, unless its dataset is committed."""
    if outs.embeddings.is_complete():
        return outs
    return replace(outs, vectors=plan_store(phrases.root, "phrase_vectors", vector_identity(params),
                                            {"phrases": phrases.version}))


def encode_vector(v: np.ndarray) -> bytes:
    return np.asarray(v, "<f4").tobytes()


def decode_vector(value: bytes, dim: int) -> np.ndarray:
    """A stored vector back, or ValueError: ``dim`` float32, finite, of unit length."""
    if len(value) != 4 * dim:
        raise ValueError(f"not {dim} float32")
    v = np.frombuffer(value, "<f4")
    if not np.isfinite(v).all() or abs(float(np.linalg.norm(v)) - 1) > 1e-3:
        raise ValueError("not a unit vector")
    return v


def vector_keys(phrases: Dataset, part: int, outs: NegativeOutputs) -> Keys:
    if outs.vectors is None or outs.vectors.entries.is_complete():  # nothing to embed
        return keys_of((), (), ())
    return phrase_keys(phrases, part)


def _phrase_part(phrases: Dataset, part: int) -> pa.Table:
    return phrases.read_part(part, columns=["phrase", "phrase_key"])


def _encoder(backbone: str, cache_dir: str | None):
    from pearl_model.inference.loading import shared_encoder

    return shared_encoder(backbone, cache_dir)


def load_models(params: dict) -> None:
    """Load (once per process) and run once the encoder that embeds the phrases."""
    _encoder(params["backbone"], params.get("cache_dir")).encode(["warm up"], normalize=True)


def embed_part(phrases: Dataset, part: int, out: Dataset, params: dict, store: ReuseStore | None = None,
               refs: np.ndarray | None = None) -> dict:
    """One part's vectors; ``store``, ``refs``: the `phrase_vectors` store and this part's entry of
    its plan (`plan_vector_reuse`), phrases whose vector the previous build's store holds."""
    if out.has_part(part):
        return {"part": part, "reused": True}
    t = _phrase_part(phrases, part)
    texts = t["phrase"].to_pylist()
    encoder = _encoder(params["backbone"], params.get("cache_dir"))
    vectors, counts = reuse_part(
        store, part, refs, [content_key(x) for x in texts], [item_of(k) for k in t["phrase_key"].to_pylist()],
        lambda todo: list(encoder.encode([texts[i] for i in todo], normalize=True, canonical=True).astype(np.float32)),
        encode_vector, lambda v: decode_vector(v, encoder.dim))
    out.write_part(part, pa.table({"phrase_key": t["phrase_key"],
                                   "vector": pa.array(vectors, pa.list_(pa.float32()))}, schema=PHRASE_EMBEDDINGS))
    return {"part": part, "reused": False, "phrases": t.num_rows, **counts}


def plan_vector_reuse(outs: NegativeOutputs, keyed: list[Keys]) -> tuple[list[np.ndarray], dict]:
    """Per phrases part, the phrases whose vector the previous store holds, and the counts."""
    return plan_reuse(outs.vectors, keyed)


def commit_embeddings(outs: NegativeOutputs, phrases: Dataset, params: dict, reuse_counts: dict | None = None) -> dict:
    """The vector store's manifest first (a run killed between the two finds both), then the embeddings'."""
    if outs.vectors is not None:
        commit_store(outs.vectors, {"phrases": phrases.version}, reuse_counts or {})
    return commit_step(outs.embeddings, phrases, params)


def part_gram_counts(phrases: Dataset, part: int, params: dict) -> Counter:
    q = neg.default_q(params["threshold"])
    return neg.gram_counts(_phrase_part(phrases, part)["phrase"].to_pylist(), q)


def block_part(phrases: Dataset, part: int, counts: Counter, out: Dataset, params: dict) -> int:
    if out.has_part(part):
        return -1
    t = _phrase_part(phrases, part)
    q, threshold, n = neg.default_q(params["threshold"]), params["threshold"], params["block_buckets"]
    rows = []
    for phrase, key in zip(t["phrase"].to_pylist(), t["phrase_key"].to_pylist()):
        for block_key in neg.blocking_keys(phrase, counts, threshold, q):
            rows.append({"block_bucket": bucket_of(block_key, n), "block_key": block_key,
                         "phrase_key": key, "phrase": phrase})
    return out.write_part(part, pa.Table.from_pylist(rows, schema=NEGATIVE_BLOCKS))


def candidates_bucket(blocks: Dataset, bucket: int, out: Dataset, params: dict) -> dict:
    """Verified pairs of every block in one bucket of block keys; counts of the work done."""
    stats = neg.CandidateStats()
    if out.has_part(bucket):
        return {"bucket": bucket, "reused": True}
    t = blocks.read_bucket(bucket, columns=["block_key", "phrase_key", "phrase"])
    members: dict[str, list[tuple[str, str]]] = defaultdict(list)
    surface: dict[str, str] = {}
    for bk, key, phrase in zip(*(t[c].to_pylist() for c in ("block_key", "phrase_key", "phrase"))):
        members[bk].append((key, phrase))
        surface[key] = phrase
    found: dict[tuple[str, str], float] = {}
    for block in members.values():
        for a, b, s in neg.candidate_pairs(block, params["threshold"], max_block=params["max_block"], stats=stats):
            found[a, b] = s
    n = params["phrase_buckets"]
    rows = [{"query_bucket": bucket_of(q, n), "query_key": q, "candidate_key": c, "candidate": surface[c],
             "edit_sim": s} for q, c, s in neg.both_directions((a, b, s) for (a, b), s in found.items())]
    out.write_part(bucket, pa.Table.from_pylist(rows, schema=NEGATIVE_CANDIDATES))
    return {"bucket": bucket, "reused": False, "pairs_compared": stats.pairs_compared,
            "pairs_skipped": stats.pairs_skipped, "largest_block": stats.largest_block, "pairs": len(found)}


def _vectors(embeddings: Dataset, keys: list[str]) -> dict[str, np.ndarray]:
    if not keys:
        return {}
    t = embeddings.read(filter=pads.field("phrase_key").isin(keys))
    return {k: np.asarray(v, dtype=np.float32) for k, v in zip(t["phrase_key"].to_pylist(), t["vector"].to_pylist())}


def select_bucket(phrases: Dataset, part: int, candidates: Dataset, embeddings: Dataset, out: Dataset,
                  params: dict) -> dict:
    if out.has_part(part):
        return {"part": part, "reused": True}
    queries = _phrase_part(phrases, part)
    c = candidates.read_bucket(part, columns=["query_key", "candidate_key", "candidate", "edit_sim"])
    pairs: dict[str, list] = defaultdict(list)
    surface = {}
    for q, ck, cand, s in zip(*(c[col].to_pylist() for col in ("query_key", "candidate_key", "candidate", "edit_sim"))):
        pairs[q].append((q, ck, s))
        surface[ck] = cand
    top = {q: neg.top_candidates(q, ps, params["max_candidates"]) for q, ps in pairs.items()}
    vecs = _vectors(embeddings, sorted(set(top) | {ck for cs in top.values() for ck, _ in cs}))
    rows, stats = [], Counter(phrases_in=queries.num_rows)
    for phrase, key in zip(queries["phrase"].to_pylist(), queries["phrase_key"].to_pylist()):
        cands = top.get(key, [])
        if not cands:
            stats["phrases_without_candidate"] += 1
            continue
        cand_vecs = np.stack([vecs[ck] for ck, _ in cands])
        sims = np.array([s for _, s in cands])
        idx, scores = neg.select_negatives(vecs[key], cand_vecs, sims, params["margin"], params["k"])
        if len(idx) == 0:
            stats["phrases_without_negative"] += 1
            continue
        stats["phrases_with_negative"] += 1
        cos = neg.cosine_scores(vecs[key], cand_vecs)
        for rank, (i, score) in enumerate(zip(idx, scores)):
            ck = cands[int(i)][0]
            rows.append({"phrase_key": key, "phrase": phrase, "negative": surface[ck], "negative_key": ck,
                         "edit_sim": float(sims[i]), "cosine": float(cos[i]), "score": float(score), "rank": rank})
    out.write_part(part, pa.Table.from_pylist(rows, schema=NEGATIVES))
    return {"part": part, "reused": False, **stats}


def negative_counts(out: Dataset, phrases: Dataset) -> dict:
    """Phrases with a negative, read back part by part (a phrase lives in one part): the parts written."""
    with_neg = rows = 0
    for part in out.written_parts():
        t = out.read_part(part, columns=["phrase_key"])
        rows += t.num_rows
        with_neg += len(set(t["phrase_key"].to_pylist()))
    n = phrases.manifest()["rows"]
    return {"phrases_in": n, "phrases_with_negative": with_neg, "phrases_without_negative": n - with_neg,
            "negatives": rows}


def commit_step(d: Dataset, phrases: Dataset, params: dict, stats: dict | None = None) -> dict:
    """Commit one intermediate dataset, so the next step can read it."""
    if d.is_complete():
        return d.reuse()
    return d.commit(code_version=CODE_VERSION, params=params, inputs={"phrases": phrases.version}, stats=stats)


def commit_negatives(outs: NegativeOutputs, phrases: Dataset, params: dict) -> dict:
    if outs.negatives.is_complete():
        return outs.negatives.reuse()
    stats = {**negative_counts(outs.negatives, phrases),
             **{k: v for k, v in outs.candidates.manifest()["stats"].items()}}
    return outs.negatives.commit(code_version=CODE_VERSION, params=params, inputs={"phrases": phrases.version},
                                 stats=stats)


def candidate_work(candidate_stats: list[dict]) -> dict:
    keys = ("pairs_compared", "pairs_skipped", "pairs")
    return {**{k: sum(s.get(k, 0) for s in candidate_stats) for k in keys},
            "buckets_reused": sum(1 for s in candidate_stats if s.get("reused"))}


from prefect import task, unmapped  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402

from runs.artifacts import publish  # noqa: E402
from runs.steps import PREFECT, Steps  # noqa: E402
from storage.reuse import counts_table  # noqa: E402


@task(name="plan-negatives", cache_policy=NONE)
def plan_negatives_task(phrases: Dataset, params: dict) -> NegativeOutputs:
    return plan_vector_store(phrases, plan_negatives(phrases, params), params)


@task(name="vector-keys", task_run_name="vector-keys-{part}", cache_policy=NONE, retries=1)
def vector_keys_task(phrases: Dataset, part: int, outs: NegativeOutputs) -> Keys:
    return vector_keys(phrases, part, outs)


@task(name="plan-vector-reuse", cache_policy=NONE)
def plan_vector_reuse_task(outs: NegativeOutputs, keyed: list[Keys]) -> tuple[list[np.ndarray], dict]:
    from prefect.logging import get_run_logger

    refs, counts = plan_vector_reuse(outs, keyed)
    log_plan(outs.vectors, counts, "phrase vector", get_run_logger())
    return refs, counts


@task(name="embed-phrases", task_run_name="embed-phrases-{part}", cache_policy=NONE, retries=1)
def embed_part_task(phrases: Dataset, part: int, outs: NegativeOutputs, params: dict, refs: np.ndarray) -> dict:
    return embed_part(phrases, part, outs.embeddings, params, outs.vectors, refs)


@task(name="commit-phrase-embeddings", cache_policy=NONE)
def commit_embeddings_task(outs: NegativeOutputs, phrases: Dataset, params: dict, reuse_counts: dict) -> dict:
    from prefect.artifacts import create_table_artifact

    manifest = commit_embeddings(outs, phrases, params, reuse_counts)
    if outs.vectors is not None:
        publish(create_table_artifact, counts_table(outs.vectors.entries.manifest()["stats"]),
                key="phrase-vector-reuse",
                description="Phrases whose vector was reused from the previous build's phrase_vectors, and encoded")
    return manifest


@task(name="gram-counts", task_run_name="gram-counts-{part}", cache_policy=NONE)
def gram_counts_task(phrases: Dataset, part: int, params: dict) -> Counter:
    return part_gram_counts(phrases, part, params)


@task(name="block-phrases", task_run_name="block-phrases-{part}", cache_policy=NONE, retries=1)
def block_part_task(phrases: Dataset, part: int, counts: list[Counter], outs: NegativeOutputs, params: dict) -> int:
    return block_part(phrases, part, neg.merge_gram_counts(counts), outs.blocks, params)


@task(name="candidate-pairs", task_run_name="candidate-pairs-{bucket}", cache_policy=NONE, retries=1)
def candidates_task(outs: NegativeOutputs, bucket: int, params: dict) -> dict:
    return candidates_bucket(outs.blocks, bucket, outs.candidates, params)


@task(name="select-negatives", task_run_name="select-negatives-{part}", cache_policy=NONE, retries=1)
def select_task(phrases: Dataset, part: int, outs: NegativeOutputs, params: dict) -> dict:
    return select_bucket(phrases, part, outs.candidates, outs.embeddings, outs.negatives, params)


@task(name="commit-negatives-step", task_run_name="commit-{d.name}", cache_policy=NONE)
def commit_step_task(d: Dataset, phrases: Dataset, params: dict, stats: dict | None = None) -> dict:
    return commit_step(d, phrases, params, stats)


@task(name="commit-negatives", cache_policy=NONE)
def commit_negatives_task(outs: NegativeOutputs, phrases: Dataset, params: dict) -> dict:
    return commit_negatives(outs, phrases, params)


def examples_table(negatives: Dataset, augmentations: Dataset, n: int = 12) -> list[dict]:
    """Phrases with their cached positives by kind and their negatives (edit sim, cosine)."""
    t = negatives.read().to_pylist()
    t.sort(key=lambda r: (-r["score"], r["phrase_key"], r["rank"]))
    chosen = list(dict.fromkeys(r["phrase_key"] for r in t))[:n]
    pos = augmentations.read(columns=["phrase_key", "kind", "positive"],
                             filter=pads.field("phrase_key").isin(chosen)).to_pylist() if chosen else []
    by_pos: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in pos:
        by_pos[r["phrase_key"]][r["kind"]].append(r["positive"])
    rows = []
    for key in chosen:
        negs = [r for r in t if r["phrase_key"] == key]
        rows.append({"phrase": negs[0]["phrase"],
                     "positives": "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted(by_pos[key].items())),
                     "negatives (edit sim / cosine)": "; ".join(
                         f"{r['negative']} ({r['edit_sim']:.2f} / {r['cosine']:.2f})" for r in negs)})
    return rows


@task(name="commit-candidates", cache_policy=NONE)
def commit_candidates_task(outs: NegativeOutputs, phrases: Dataset, params: dict, work: list[dict]) -> dict:
    return commit_step(outs.candidates, phrases, params, candidate_work(work))


@task(name="negatives-report", cache_policy=NONE)
def negatives_report_task(outs: NegativeOutputs, augmentations: Dataset) -> dict:
    from prefect.artifacts import create_table_artifact

    stats = outs.negatives.manifest()["stats"]
    publish(create_table_artifact, [{"what": k.replace("_", " "), "count": v} for k, v in stats.items()],
            key="negative-counts", description="Hard negatives: phrases with and without, work done")
    publish(create_table_artifact, examples_table(outs.negatives, augmentations), key="negative-examples",
            description="Phrases, their cached positives, and their hard negatives")
    return {"negatives": stats, "versions": {d.name: d.version for d in outs.all()}}


def negatives_stage(phrases: Dataset, params: dict, *, steps: Steps = PREFECT) -> NegativeOutputs:
    """The stage in its flow: phrases -> phrase_embeddings, negative_blocks, negative_candidates,
    negatives; each step one task per bucket and committed before the next reads it. The embed
    step reuses the vectors the previous build's `phrase_vectors` holds (the phrases' keys first,
    one task per part, then matched in the flow)."""
    parts = range(params["phrase_buckets"])
    steps.stage("phrase_embeddings")
    steps.load(load_models, params)
    negs = steps.call(plan_negatives_task, phrases, params)
    keyed = steps.map(vector_keys_task, unmapped(phrases), parts, unmapped(negs))
    refs, counts = steps.call(plan_vector_reuse_task, negs, keyed)
    steps.map(embed_part_task, unmapped(phrases), parts, unmapped(negs), unmapped(params), refs)
    steps.call(commit_embeddings_task, negs, phrases, params, counts)
    steps.stage("negatives")
    grams = steps.map(gram_counts_task, unmapped(phrases), parts, unmapped(params))
    steps.map(block_part_task, unmapped(phrases), parts, unmapped(grams), unmapped(negs), unmapped(params))
    steps.call(commit_step_task, negs.blocks, phrases, params)
    work = steps.map(candidates_task, unmapped(negs), range(params["block_buckets"]), unmapped(params))
    steps.call(commit_candidates_task, negs, phrases, params, work)
    steps.map(select_task, unmapped(phrases), parts, unmapped(negs), unmapped(params))
    steps.call(commit_negatives_task, negs, phrases, params)
    return negs
