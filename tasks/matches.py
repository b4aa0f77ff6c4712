"""Stage: link the names of two tables (or of one table against itself) into the versioned `matches`
dataset (`deduped_matches` with `dedupe`), by partitions on Dask. The flow is flows/link.py.

1. :func:`plan_link`: the parameters checked, the model resolved as `pearl link` resolves it
   (storage.registry.resolve_model), the inputs stat'ed: the output version is a hash of the inputs'
   fingerprints, the model, the parameters and CODE_VERSION. A committed version is reused.
2. :func:`split_side`: a side's column streamed into working partitions of ``partition_rows`` rows
   (`link_names`), rows and null or empty names counted. Bad input (a missing column, no rows, no
   name at all, a CSV that is not UTF-8) fails here, before any model loads.
   :func:`check_labels`: labels that say two things of one name or name a name absent from the
   tables fail here too.
3. :func:`tuning_sample`: with a ``recall_target`` and an approximate index, up to ``recall_sample``
   left names drawn at random (seeded) over the whole left side.
4. :func:`encode_part`: per partition of either side, its names encoded into the working directory
   (a left partition's distinct names; a right partition's names first seen in its index shard, so
   that a shard's partitions' vectors, in order, are its distinct names'). These tasks do not wait on
   one another, so the workers stay busy: the left side encodes while a right shard is indexed. With
   dedupe a left partition's vectors are gathered from the right partitions' (the same table, split
   alike) before the index takes them: each name is encoded once.
5. :func:`index_right`: per index shard (``index_rows`` right rows: consecutive right partitions,
   one by default), its partitions' vectors indexed (FAISS: exact inner product while the right side
   holds at most ``exact_limit`` names, HNSW above), the index alone kept in the working directory
   (it holds the vectors: :func:`~pearl_model.linking.index.stored_vectors`; the right vectors are
   removed). With a recall target, the shard's HNSW index is tuned there, while it is in memory:
   recall@k of the sample against exact at efSearch 16, 32, ... up to the first that reaches it.
6. :func:`query_left`: per left partition, its vectors queried against every shard's index at the
   run's efSearch (:func:`search_settings`: ``ef_search``, or the largest the shards' tuning chose),
   the partial top k merged (``merge_top_k``) into the partition's candidates; with an approximate
   index, left partition 0 measures its recall against exact on each shard (from the vectors the
   index holds).
7. :func:`choose_threshold`: the threshold given, or the one the labels choose for ``precision``, with
   its precision and recall on them and their 95% intervals.
8. :func:`write_matches`: each partition's candidates cut at the threshold (with clusters for
   dedupe) into the output version's parts, each part's counts in its footer; then the manifest,
   last, with the counts, the histogram and the examples the report shows; the working directory is
   removed. A run that fails before the manifest commits nothing.

Memory per worker stays flat in the tables' size: a task holds one left partition, its candidates
(``top_k`` per row) and one shard's index (its vectors inside it) at a time, never a whole side. A left name's
search costs about linearly in the shards it visits but only logarithmically in an HNSW shard's
size: fewer, larger shards trade memory per worker for search time.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from dataclasses import dataclass, field

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pearl_model.linking.index import EF_SEARCH_STEPS, HNSW_EF_SEARCH
from pearl_model.linking.sides import MAX_ROW_BYTES
from pearl_redact import redact
from storage.datasets import Dataset, dataset_version, file_fingerprint, resolve_root
from storage.schemas import DEDUPED_MATCHES, LINK_NAMES, MATCHES
from storage.verified import read_recorded, remove_recorded, write_recorded

CODE_VERSION = "matches-7"  # 2: the rescored score; 3: NUL bytes stripped from names; 4: names encoded
# per partition (the batches a name is encoded in differ, and so may its last bits); 5: dedupe encodes
# each name once (its left vector is its right one, to the last bit); 6: dedupe tunes efSearch to the
# recall of the nearest other names (a name finding itself made any efSearch reach the target); 7: a
# label with an empty right cell is a name with no partner, its match counted wrong (was: dropped)
# Rows per partition, on each side: 100k names are ~150 MB of 384-dimensional float32 vectors and
# index, and a left partition's candidates are partition_rows x top_k rows, whatever the tables' size.
PARTITION_ROWS = 100_000
RECALL_SAMPLE = 1000  # left names whose approximate top k is checked against exact (and tunes efSearch)
# The defaults of the layout measured fastest at 1M x 1M (docs/research/speed-link-scale.md): index
# shards of a million right names (a left name's HNSW search grows with the shards it visits, only
# slowly with a shard's size), efSearch tuned per run to a recall target, and exact search only for
# small right sides: an exact query costs in proportion to the names, an HNSW query tuned to the
# target a fraction of that above a few hundred thousand (the search study on the same page). `pearl link`
# keeps pearl_model.linking.index.EXACT_LIMIT: it measures no recall, so it stays exact longer.
INDEX_ROWS = 1_000_000
RECALL_TARGET = 0.98
EXACT_LIMIT = 200_000
TUNING_SEED = 0  # draws the left rows that tune efSearch to a recall target
HISTOGRAM_BINS = 80  # of the best match's score, over [-1, 1]
EXAMPLES = 10  # example matches on each side of the threshold
WORK = "link_work"  # <storage_root>/link_work/<version>/: the run's partitions, removed after commit


@dataclass(frozen=True)
class LinkPlan:
    """What a link run reads and writes; picklable (sent to the Dask workers)."""

    left: str
    right: str | None  # None: dedupe, the left table against itself
    left_column: str
    right_column: str
    model: str  # what to load (`current` resolved to its location; a stored model's URL: each worker's copy)
    model_name: str
    top_k: int
    threshold: float | None
    cosine_weight: float
    labels: str | None
    precision: float
    partition_rows: int
    index_rows: int  # right rows per index shard: whole partitions, so rounded up to them
    index_kind: str
    exact_limit: int
    recall_sample: int
    batch_size: int | None
    out: Dataset
    params: dict = field(hash=False)
    inputs: dict = field(hash=False)
    notes: tuple[str, ...] = ()
    max_row_bytes: int = MAX_ROW_BYTES  # the longest CSV row read (a limit on memory, not on the output)
    ef_search: int = HNSW_EF_SEARCH  # an HNSW index's efSearch, unless a recall target tunes it
    recall_target: float | None = None  # recall@top_k against exact that tunes efSearch (None: ef_search)

    @property
    def dedupe(self) -> bool:
        return self.right is None

    @property
    def work(self) -> str:
        return f"{self.out.root}/{WORK}/{self.out.version}"

    def names(self, side: str) -> Dataset:
        """The working partitions of ``side`` (left or right; dedupe has one, `table`)."""
        return Dataset(self.work, "table" if self.dedupe else side, "names", LINK_NAMES)

    @property
    def candidates(self) -> Dataset:
        return Dataset(self.work, "candidates", "top_k", MATCHES)

    @property
    def work_path(self) -> str:
        return fsspec.core.url_to_fs(self.work)[1]

    @property
    def parts_per_shard(self) -> int:
        """Right partitions per index shard (``index_rows`` rounded up to whole partitions)."""
        return -(-self.index_rows // self.partition_rows)

    def shards(self, right_parts: int) -> int:
        """Index shards over ``right_parts`` right partitions."""
        return -(-right_parts // self.parts_per_shard)

    def shard_parts(self, shard: int, right_parts: int) -> range:
        """The right partitions of index shard ``shard`` (the last shard may hold fewer)."""
        first = shard * self.parts_per_shard
        return range(first, min(first + self.parts_per_shard, right_parts))

    def vectors_name(self, side: str, part: int) -> str:
        """Partition ``part`` of ``side``'s vectors (:func:`encode_part`), in the working directory."""
        return f"vectors/{side}/part-{part:05d}.npy"

    def index_name(self, shard: int) -> str:
        """Index shard ``shard``'s file (one partition per shard: the partition's number)."""
        return f"index/part-{shard:05d}.faiss"


@dataclass
class SideParts:
    """A side split into partitions: how many, and its rows (blank names included), skipped names and
    names that held NUL bytes (stripped when read: kept, or skipped when nothing else was left)."""

    source: str
    column: str
    parts: int
    rows: int
    skipped: int
    nul_stripped: int = 0

    @property
    def names(self) -> int:
        return self.rows - self.skipped


def model_identity(spec: str, version: str | None) -> str:
    """What versions the output for the model: the registry version of the current model, a local
    directory's files (names, sizes, modification times), else the spec (a backbone or hub name)."""
    if version is not None:
        return f"models/{version}"
    if os.path.isdir(spec):
        h = hashlib.sha256()
        for base, dirs, files in sorted(os.walk(spec)):
            dirs.sort()
            for name in sorted(files):
                st = os.stat(os.path.join(base, name))
                h.update(f"{os.path.relpath(os.path.join(base, name), spec)}:{st.st_size}:{st.st_mtime_ns}\0".encode())
        return f"{os.path.abspath(spec)}@{h.hexdigest()[:16]}"
    return spec


def _fingerprint(url: str) -> str:
    from pearl_model.linking.sides import LinkInputError, table_format

    table_format(url)  # a suffix this reads, before anything else
    info = file_fingerprint(url, LinkInputError, "a CSV or Parquet table")
    return f"{info['url']}@{info['size']}@{info['stamp']}"


def plan_link(left: str, right: str | None, storage_root: str, *, left_column: str = "title",
              right_column: str = "title", model: str = "current", top_k: int = 1,
              threshold: float | None = None, cosine_weight: float | None = None, labels: str | None = None, precision: float = 0.9,
              dedupe: bool = False, partition_rows: int = PARTITION_ROWS, index_rows: int | None = None,
              index_kind: str = "auto", exact_limit: int | None = None, recall_sample: int = RECALL_SAMPLE,
              batch_size: int | None = None, max_row_bytes: int = MAX_ROW_BYTES, ef_search: int | None = None,
              recall_target: float | None = None) -> LinkPlan:
    """Check the parameters (as `pearl link` does) and the inputs' existence, resolve the model, and
    name the output version. Nothing is read or written.

    ``ef_search`` or ``recall_target`` (not both; neither: the target RECALL_TARGET) set an HNSW
    index's efSearch: the value given, or the smallest of 16, 32, ... 1024 whose recall@top_k against
    exact reaches the target on every shard, measured on ``recall_sample`` left names (1024, with a
    warning and the recall it reached in the report, where none does; with ``recall_sample`` 0 and
    no ef_search, 128). Exact indexes ignore both. ``index_rows`` defaults to INDEX_ROWS (at least
    ``partition_rows``), ``exact_limit`` to EXACT_LIMIT."""
    from pearl_model.inference.backbones import DEFAULT_BACKBONE
    from pearl_model.linking import index as vector_index
    from pearl_model.linking import rescore
    from pearl_model.linking.request import PARAMETER_NAMES, request_error
    from storage.registry import resolve_model

    problem = request_error(dedupe, bool(right), threshold is not None, labels is not None, PARAMETER_NAMES)
    if problem:
        raise ValueError(problem)
    if top_k < 1 or partition_rows < 1 or recall_sample < 0 or max_row_bytes < 1:
        raise ValueError("top_k, partition_rows and max_row_bytes must be >= 1, recall_sample >= 0")
    index_rows = max(INDEX_ROWS, partition_rows) if index_rows is None else index_rows
    if index_rows < partition_rows:  # a shard holds whole partitions
        raise ValueError(f"index_rows {index_rows} is below partition_rows {partition_rows}: an index holds "
                         "whole right partitions")
    if not 0.0 <= precision <= 1.0:
        raise ValueError(f"precision {precision} is not in [0, 1]")
    if ef_search is not None and recall_target is not None:
        raise ValueError("give ef_search or recall_target, not both: the target chooses efSearch")
    if ef_search is not None and ef_search < 1:
        raise ValueError(f"ef_search {ef_search} is below 1")
    if recall_target is not None and not (0.0 < recall_target <= 1.0 and recall_sample >= 1):
        raise ValueError(f"recall_target {recall_target} needs to be in (0, 1] and recall_sample >= 1 (the names "
                         "it is measured on)")
    exact_limit = EXACT_LIMIT if exact_limit is None else exact_limit
    if recall_target is None and ef_search is None and recall_sample >= 1:  # recall_sample 0: nothing measured
        recall_target = RECALL_TARGET
    cosine_weight = rescore.COSINE_WEIGHT if cosine_weight is None else cosine_weight
    rescore.default_weights(cosine_weight)  # out of [0, 1] fails here
    vector_index.choose_kind(0, index_kind, exact_limit)  # an unknown kind fails here
    resolved = resolve_model(model, storage_root, DEFAULT_BACKBONE)
    inputs = {"left": _fingerprint(left), "model": model_identity(resolved.spec, resolved.version)}
    if right is not None:
        inputs["right"] = _fingerprint(right)
    if labels is not None:
        inputs["labels"] = _fingerprint(labels)
    params = {"left_column": left_column, "right_column": None if dedupe else right_column, "top_k": top_k,
              "threshold": threshold, "cosine_weight": cosine_weight, "precision": precision if labels else None, "dedupe": dedupe,
              "partition_rows": partition_rows, "index_kind": index_kind, "exact_limit": exact_limit}
    if index_rows != partition_rows:  # one partition per shard is the run before shards: its version stays
        params["index_rows"] = index_rows
    ef_search = HNSW_EF_SEARCH if ef_search is None else ef_search
    if index_kind != "exact":  # as index_rows: only a value that can change the results versions them
        if ef_search != HNSW_EF_SEARCH:
            params["ef_search"] = ef_search
        if recall_target is not None:
            params |= {"recall_target": recall_target, "recall_sample": recall_sample}
    name, schema = ("deduped_matches", DEDUPED_MATCHES) if dedupe else ("matches", MATCHES)
    out = Dataset(resolve_root(storage_root), name, dataset_version(name, CODE_VERSION, params, inputs), schema)
    # the workers load the model from its location (each its own copy), not from this process's copy
    return LinkPlan(left, right, left_column, left_column if dedupe else right_column, resolved.shared,
                    resolved.name, top_k, threshold, cosine_weight, labels, precision, partition_rows, index_rows, index_kind,
                    exact_limit, recall_sample, batch_size, out, params, inputs, (resolved.note,) if resolved.note else (),
                    max_row_bytes, ef_search, recall_target)


def start_work(plan: LinkPlan) -> None:
    """An empty working directory (what an earlier, failed run of this version left is removed)."""
    fs = plan.out.fs
    if fs.exists(plan.work_path):
        fs.rm(plan.work_path, recursive=True)


def split_side(plan: LinkPlan, side: str) -> SideParts:
    """Stream ``side``'s column into working partitions of ``plan.partition_rows`` rows."""
    from pearl_model.linking.sides import LinkInputError, iter_column, side_from_array

    url, column = (plan.left, plan.left_column) if side == "left" or plan.dedupe else (plan.right, plan.right_column)
    names = plan.names(side)
    parts = rows = skipped = nul = 0
    for chunk in iter_column(url, column, plan.partition_rows, plan.max_row_bytes):
        read = side_from_array(chunk, url, column)
        names.write_part(parts, pa.table({"row": pa.array(np.arange(rows, rows + len(chunk)), pa.int64()),
                                          "name": chunk}), {"rows": len(chunk), "skipped": read.skipped})
        parts, rows, skipped, nul = parts + 1, rows + len(chunk), skipped + read.skipped, nul + read.nul_stripped
    if rows == skipped:
        raise LinkInputError(f"{url}: all {rows} names in column {column!r} are null or empty")
    return SideParts(url, column, parts, rows, skipped, nul)


def read_side(plan: LinkPlan, side: str, part: int):
    """Working partition ``part`` of ``side`` as a linking Side (rows: the table's)."""
    from pearl_model.linking.sides import side_from_array

    t = plan.names(side).read_part(part)
    first = t["row"][0].as_py() if t.num_rows else 0
    source, column = (plan.left, plan.left_column) if side == "left" or plan.dedupe else (plan.right, plan.right_column)
    return side_from_array(t["name"], source, column, first)


def read_shard(plan: LinkPlan, shard: int, right: SideParts):
    """Index shard ``shard``'s right partitions as one linking Side (rows: the table's)."""
    from pearl_model.linking.sides import concat_sides

    return concat_sides([read_side(plan, "right", j) for j in plan.shard_parts(shard, right.parts)])


class LinkModelError(ValueError):
    """The model cannot be loaded; the message names it."""


@functools.lru_cache(maxsize=2)
def load_model(spec: str):
    """The encoder, loaded once per worker process."""
    from pearl_model.inference.backbones import BackboneError
    from pearl_model.inference.export import PearlExportError
    from pearl_model.inference.loading import load_encoder
    from storage.registry import loadable_spec

    try:
        return load_encoder(loadable_spec(spec))
    except (BackboneError, PearlExportError, ImportError, OSError) as e:  # what `pearl link` reports too
        raise LinkModelError(f"cannot load the model {spec!r}: {e}") from e


def index_kind(plan: LinkPlan, right: SideParts) -> str:
    """exact or hnsw: ``plan.index_kind``, where auto is exact while the right side holds at most
    ``plan.exact_limit`` names (every partition gets the same kind)."""
    from pearl_model.linking import index as vector_index

    return vector_index.choose_kind(right.names, plan.index_kind, plan.exact_limit)


def tuning_sample(plan: LinkPlan, left: SideParts, right: SideParts) -> list[str]:
    """The left names that tune efSearch to ``plan.recall_target``: the distinct names of up to
    ``plan.recall_sample`` rows drawn at random (seeded: every run draws the same) over the whole left
    side, blanks left out. None without a target, or with an exact index."""
    if plan.recall_target is None or index_kind(plan, right) == "exact":
        return []
    rows = np.sort(np.random.default_rng(TUNING_SEED).choice(left.rows, min(left.rows, plan.recall_sample),
                                                             replace=False))
    names = []
    for part in np.unique(rows // plan.partition_rows):
        side = read_side(plan, "left", int(part))
        names += [side.names[i] for i in np.flatnonzero(np.isin(side.rows, rows))]
    return list(dict.fromkeys(names))


def _shard_new_names(plan: LinkPlan, shard: int, right: SideParts):
    """(right partition, its distinct names not in an earlier partition of index shard ``shard``, in
    order of first appearance) for each partition of the shard in turn: the shard's distinct names
    (``distinct_names`` of the whole shard) are these lists, concatenated in partition order."""
    from pearl_model.linking.matches import distinct_names

    seen: set[str] = set()
    for j in plan.shard_parts(shard, right.parts):
        new = [n for n in distinct_names(read_side(plan, "right", j))[0] if n not in seen]
        seen.update(new)
        yield j, new


def _new_in_shard(plan: LinkPlan, part: int, right: SideParts) -> list[str]:
    """Right partition ``part``'s names first seen in its index shard (:func:`_shard_new_names`)."""
    shard = part // plan.parts_per_shard
    for j, new in _shard_new_names(plan, shard, right):
        if j == part:
            return new
    raise ValueError(f"right partition {part} is not in index shard {shard}")


def encode_part(plan: LinkPlan, side: str, part: int, right: SideParts) -> int:
    """Encode partition ``part`` of ``side`` (left: its distinct names; right: those first seen in its
    index shard, :func:`_new_in_shard`) into :meth:`LinkPlan.vectors_path`; returns how many."""
    import io

    from pearl_model.linking import matches
    from pearl_model.linking.sides import side_from_array

    if side == "left":
        names = matches.distinct_names(read_side(plan, "left", part))[0]
    else:
        names = _new_in_shard(plan, part, right)
    if side == "left" and plan.dedupe and names:
        vectors = _dedupe_left_vectors(plan, part, right, names)
    else:
        vectors = matches.encode_side(load_model(plan.model), side_from_array(pa.array(names, pa.string()), side, ""),
                                      plan.batch_size).vectors if names else np.zeros((0, 0), np.float32)
    buffer = io.BytesIO()
    np.save(buffer, vectors, allow_pickle=False)
    write_recorded(plan.out.fs, plan.work_path, plan.vectors_name(side, part), buffer.getbuffer())
    return len(names)


def _dedupe_left_vectors(plan: LinkPlan, part: int, right: SideParts, names: list[str]) -> np.ndarray:
    """With dedupe the table is both sides, split alike, so each of left partition ``part``'s distinct
    ``names`` was encoded once already, as a right name of ``part`` or of an earlier partition of its
    index shard: its vectors are gathered from there rather than encoded a second time (the flow
    encodes the right side first)."""
    where: dict[str, tuple[int, int]] = {}
    for j, new in _shard_new_names(plan, part // plan.parts_per_shard, right):
        where.update((n, (j, i)) for i, n in enumerate(new))
        if j == part:
            break
    vectors = {j: _vectors(plan, "right", j) for j in {where[n][0] for n in names}}
    return np.stack([vectors[where[n][0]][where[n][1]] for n in names])

def _vectors(plan: LinkPlan, side: str, part: int) -> np.ndarray:
    import io

    data = read_recorded(plan.out.fs, plan.work_path, plan.vectors_name(side, part), plan.work)
    return np.load(io.BytesIO(data), allow_pickle=False)


def _shard_vectors(plan: LinkPlan, parts: range, names: int) -> np.ndarray:
    """The vectors of a shard's ``names`` distinct names from its partitions' (:func:`encode_part`),
    filled into one array part by part (a concatenation would hold them twice)."""
    out = None
    row = 0
    for j in parts:
        v = _vectors(plan, "right", j)
        if not len(v):
            continue
        if out is None:
            out = np.empty((names, v.shape[1]), np.float32)
        if row + len(v) > names:
            raise ValueError(f"right partitions {parts.start}-{parts.stop - 1} hold more vectors than their {names} names")
        out[row:row + len(v)] = v
        row += len(v)
    if row != names:
        raise ValueError(f"right partitions {parts.start}-{parts.stop - 1} hold {row} vectors for {names} names")
    return out


def index_right(plan: LinkPlan, shard: int, right: SideParts, sample: list[str] = ()) -> dict:
    """Index shard ``shard``'s distinct names from its partitions' vectors (:func:`encode_part`) with
    :func:`index_kind`; the index alone goes to the working directory (it holds the vectors) and the
    partitions' vectors are removed. With ``sample`` (:func:`tuning_sample`) an HNSW index is tuned to
    ``plan.recall_target`` (:func:`~pearl_model.linking.index.tune_ef_search`). Returns its distinct
    names (``names``) and the efSearch tried with their recall (``tuned``: [efSearch, recall] pairs;
    none untuned)."""
    import faiss

    from pearl_model.linking import index as vector_index
    from pearl_model.linking import matches, rescore
    from pearl_model.linking.sides import side_from_array

    kind = index_kind(plan, right)
    parts = plan.shard_parts(shard, right.parts)
    encoded = matches.encoded_from_vectors(read_shard(plan, shard, right), None)
    tuned = []
    if len(encoded.distinct):
        # the vectors live on in the index alone: a shard's vectors are held once, then once in it
        index = vector_index.build_index(_shard_vectors(plan, parts, len(encoded.distinct)), kind)
        if sample and kind != "exact":
            queries = matches.encode_side(load_model(plan.model),
                                          side_from_array(pa.array(list(sample), pa.string()), "sample", ""),
                                          plan.batch_size).vectors
            tuned = vector_index.tune_ef_search(index, queries, plan.top_k, plan.recall_target, EF_SEARCH_STEPS,
                                                rescore.candidate_count(plan.top_k, plan.cosine_weight),
                                                _self_ids(plan, sample, encoded.distinct))
            vector_index.set_ef_search(index, plan.ef_search)  # the saved index as built; the queries set theirs
        write_recorded(plan.out.fs, plan.work_path, plan.index_name(shard), faiss.serialize_index(index))
    for j in parts:  # the index holds them now
        remove_recorded(plan.out.fs, plan.work_path, plan.vectors_name("right", j))
    return {"names": len(encoded.distinct), "tuned": [[ef, r] for ef, r in tuned]}


def _self_ids(plan: LinkPlan, names, index_names: list[str]) -> np.ndarray | None:
    """With dedupe, each of ``names``' own id in an index of ``index_names`` (-1: not there), which the
    recall measurements leave out (a name always finds itself); None when two tables are linked."""
    if not plan.dedupe:
        return None
    at = {name: i for i, name in enumerate(index_names)}
    return np.array([at.get(name, -1) for name in names], np.int64)


def search_settings(plan: LinkPlan, right: SideParts, shards: list[dict]) -> dict:
    """How the queries search: the efSearch of an HNSW index (None for exact), ``plan.ef_search`` or,
    with a recall target, the largest efSearch the shards' tuning chose (:func:`index_right`), so that
    every shard reaches the target; ``target_met`` False where a shard reached it at no efSearch tried
    (then the cap is used). ``tuning``: each tuned shard's efSearch and the recall measured there."""
    from pearl_model.linking import index as vector_index

    if index_kind(plan, right) == "exact":
        return {"ef_search": None, "recall_target": None}
    chosen = [vector_index.chosen_ef_search(s["tuned"], plan.recall_target) for s in shards if s["tuned"]]
    if not chosen:  # untuned (no target, or no left name to tune on)
        return {"ef_search": plan.ef_search, "recall_target": plan.recall_target}
    return {"ef_search": max(ef for ef, _, _ in chosen), "recall_target": plan.recall_target,
            "target_met": all(met for _, _, met in chosen),
            "tuning": [{"shard": j, "ef_search": ef, "recall": r} for j, (ef, r, _) in
                       zip((j for j, s in enumerate(shards) if s["tuned"]), chosen)]}


def _right(plan: LinkPlan, shard: int, right: SideParts):
    """(index shard ``shard``'s names and rows, its index) from the working directory: the index alone
    is read (the vectors are in it)."""
    import faiss

    from pearl_model.linking import matches

    # the checked bytes, then the index: a shard is held twice for a moment (faiss reading the file
    # itself would parse bytes no digest checked: a flipped byte changed search results silently)
    data = read_recorded(plan.out.fs, plan.work_path, plan.index_name(shard), plan.work)
    index = faiss.deserialize_index(np.frombuffer(data, np.uint8))
    del data
    return matches.encoded_from_vectors(read_shard(plan, shard, right), None, index.ntotal), index


def query_left(plan: LinkPlan, part: int, right: SideParts, shards: list[dict]) -> dict:
    """Left partition ``part``'s top k among every index shard (``shards``: as :func:`index_right`
    returned them; those without a name are skipped), at the efSearch of :func:`search_settings`,
    written as candidate part ``part``. Left partition 0 with an approximate index also measures its
    recall@k against exact, per shard, on up to ``recall_sample`` of its distinct names (the exact
    top k from the vectors the index holds)."""
    from pearl_model.linking import index as vector_index
    from pearl_model.linking import matches, rescore

    found, recall = MATCHES.empty_table(), []
    side = read_side(plan, "left", part)
    if not side.names:  # a partition of blank names only
        plan.candidates.write_part(part, found)
        return {"recall": recall, "queries": 0}
    left = matches.encoded_from_vectors(side, _vectors(plan, "left", part))
    approximate = index_kind(plan, right) != "exact"
    sample = left.vectors[:plan.recall_sample] if approximate and part == 0 else left.vectors[:0]
    wanted = rescore.candidate_count(plan.top_k, plan.cosine_weight)  # by cosine, then rescored
    ef_search = search_settings(plan, right, shards)["ef_search"]
    for j in (j for j, s in enumerate(shards) if s["names"]):
        shard, index = _right(plan, j, right)
        vector_index.set_ef_search(index, ef_search)
        partial = matches.top_k(left, shard, index, wanted, exclude_self=plan.dedupe).cast(MATCHES)
        found = matches.merge_top_k([found, partial], wanted).cast(MATCHES)
        if len(sample):
            recall.append(vector_index.recall_against_exact(
                None, sample, plan.top_k, index, _self_ids(plan, left.distinct[:len(sample)], shard.distinct)))
    plan.candidates.write_part(part, rescore.best(found, plan.top_k, plan.cosine_weight).cast(MATCHES))
    remove_recorded(plan.out.fs, plan.work_path, plan.vectors_name("left", part))
    return {"recall": recall, "queries": len(sample)}


def check_labels(plan: LinkPlan, left: SideParts, right: SideParts) -> int:
    """Read the labels and refuse, before any model loads, labels that say two things of one name or
    name a name absent from the tables (:mod:`pearl_model.linking.thresholds`); returns how many
    labelled rows there are (0 without labels)."""
    from pearl_model.linking.thresholds import check_names, read_labels

    if plan.labels is None:
        return 0
    pairs = read_labels(plan.labels, plan.max_row_bytes)
    names = {}
    for side, parts in (("left", left), ("right", right)):
        wanted = pc.unique(pairs[side].drop_null())  # only the labelled names are read back, not a whole side
        found = [plan.names(side).read_part(i, ["name"], pc.field("name").isin(wanted))
                 for i in range(parts.parts)]
        names[side] = pa.concat_arrays([f["name"].combine_chunks() for f in found]) if found else pa.array([], pa.string())
    check_names(pairs, plan.labels, names["left"], names["right"], plan.left, plan.left if plan.dedupe else plan.right)
    return pairs.num_rows


def choose_threshold(plan: LinkPlan, left_parts: int) -> dict:
    """The threshold the run cuts at: the one given, none, or the one the labels choose for
    ``plan.precision`` over the best candidates, with its intervals and counts (a target no threshold
    reaches is an error)."""
    from pearl_model.linking.thresholds import NO_LABELS, labelled_best_matches, read_labels, threshold_for_precision

    if plan.labels is None:
        given = plan.threshold is not None
        return {"value": plan.threshold, "source": "given" if given else None,
                "note": f"threshold {plan.threshold} given; not chosen from labels" if given else NO_LABELS}
    pairs = read_labels(plan.labels, plan.max_row_bytes)
    known = pc.unique(pairs["left"])
    wanted = (pc.field("rank") == 1) & pc.field("left").isin(known)
    best = pa.concat_tables([plan.candidates.read_part(i, filter=wanted) for i in range(left_parts)])
    judged = labelled_best_matches(best, pairs)
    choice = threshold_for_precision(judged.scores, judged.correct, plan.precision, judged.with_partner,
                                     judged.without_partner)
    if choice.threshold is None:
        reached = f" (the best precision reached: {choice.precision:.3f})" if choice.precision else ""
        raise ValueError(f"labels {plan.labels}: {choice.note}{reached}")
    curve = choice.curve
    if curve.num_rows > 200:  # enough points to draw
        curve = curve.take(np.unique(np.linspace(0, curve.num_rows - 1, 200).astype(int)))
    return {"value": choice.threshold, "source": "labels", "target": plan.precision, "precision": choice.precision,
            "recall": choice.recall, "labelled": choice.labelled, "note": choice.note,
            "without_partner": choice.without_partner, "kept": choice.kept, "right": choice.right,
            "precision_interval": list(choice.precision_interval), "recall_interval": list(choice.recall_interval),
            "summary": choice.summary(), "warning": choice.warning,
            "curve": {c: curve[c].to_pylist() for c in curve.column_names}}


def _examples(best: pa.Table, threshold: float | None) -> list[dict]:
    """Rank-1 matches around ``threshold`` (the EXAMPLES closest on each side), or spread over the
    scores when there is none."""
    best = best.select(["left_row", "right_row", "left", "right", "score"]).sort_by("score")
    scores = best["score"].to_numpy()
    if threshold is None:
        pick = np.unique(np.linspace(0, len(scores) - 1, 2 * EXAMPLES + 1).astype(int)) if len(scores) else []
    else:
        cut = int(np.searchsorted(scores, np.float32(threshold)))
        pick = np.arange(max(cut - EXAMPLES, 0), min(cut + EXAMPLES, len(scores)))
    return best.take(pa.array(np.asarray(pick, np.int64))).to_pylist()


def write_matches(plan: LinkPlan, left: SideParts, right: SideParts, threshold: dict, recall: dict) -> dict:
    """Cut each candidate part at the threshold into the output's parts (clusters for dedupe) and
    commit the version: the manifest, last, holds the counts and what the report shows (``recall``:
    :func:`recall_summary` and :func:`search_settings`, into the index's stats)."""
    from pearl_model.linking import clusters, matches

    t = threshold["value"]
    ids = rows = None
    if plan.dedupe:  # the clusters are over every pair kept: the pairs' rows, then each part's
        rows = np.concatenate([read_side(plan, "left", i).rows for i in range(left.parts)])
        keep = None if t is None else pc.field("score") >= pa.scalar(t, pa.float32())
        pairs = [plan.candidates.read_part(i, ["left_row", "right_row"], keep) for i in range(left.parts)]
        ids = clusters.cluster_ids(rows, np.concatenate([p["left_row"].to_numpy() for p in pairs]),
                                   np.concatenate([p["right_row"].to_numpy() for p in pairs]))
    totals = None
    hist = np.zeros(HISTOGRAM_BINS, np.int64)
    examples: list[pa.Table] = []
    for i in range(left.parts):
        side, candidates = read_side(plan, "left", i), plan.candidates.read_part(i)
        kept, _ = matches.above_threshold(candidates, t)
        n = matches.count(side, candidates, kept)
        totals = n if totals is None else matches.Counts(*(a + b for a, b in zip(
            dataclasses.astuple(totals), dataclasses.astuple(n))))
        best = candidates.filter(pc.equal(candidates["rank"], 1))
        hist += np.histogram(np.clip(best["score"].to_numpy(), -1.0, 1.0), HISTOGRAM_BINS, (-1.0, 1.0))[0]
        examples.append(pa.Table.from_pylist(_examples(best, t), best.select(
            ["left_row", "right_row", "left", "right", "score"]).schema))
        if plan.dedupe:
            kept = clusters.attach_clusters(kept, rows, ids)
        plan.out.write_part(i, kept, dataclasses.asdict(n))
    counts = dataclasses.asdict(totals)
    check_counts(counts)
    stats = {"counts": counts, "right": {"rows": right.rows, "skipped": right.skipped, "parts": right.parts},
             "nul_stripped": {"left": left.nul_stripped, "right": right.nul_stripped},
             "left_parts": left.parts, "model": plan.model_name,
             "index": {"kind": index_kind(plan, right), "right_names": right.names,
                       "exact_limit": plan.exact_limit, **recall},
             "threshold": threshold, "histogram": {"range": [-1.0, 1.0], "counts": hist.tolist()},
             "examples": _examples(pa.concat_tables(examples), t) if examples else [],
             "clusters": len(np.unique(ids)) if ids is not None else None}
    manifest = plan.out.commit(code_version=CODE_VERSION, params=plan.params, inputs=plan.inputs, stats=stats)
    start_work(plan)  # the working partitions are no longer needed
    return manifest


def check_counts(counts: dict) -> None:
    """Every left row ended one way, every candidate pair one way; else an error (a bug)."""
    rows = counts["skipped"] + counts["matched"] + counts["below_threshold"] + counts["no_candidate"]
    pairs = counts["pairs"] + counts["pairs_below_threshold"]
    if rows != counts["rows"] or pairs != counts["candidate_pairs"]:
        raise AssertionError(f"the link counts do not add up: {counts}")


def recall_summary(results: list[dict]) -> dict:
    """The approximate index's recall@k against exact, from :func:`query_left`'s results (None with
    an exact index): the mean over the index shards, and each (``recall_per_part``)."""
    per_part = [r for res in results for r in res["recall"]]
    queries = max((res["queries"] for res in results), default=0)
    return {"recall": float(np.mean(per_part)) if per_part else None, "recall_per_part": per_part,
            "recall_queries": queries}


# --- the report ------------------------------------------------------------------------------------
def counts_table(manifest: dict) -> list[dict]:
    c, r = manifest["stats"]["counts"], manifest["stats"]["right"]
    side = "table" if manifest["params"]["dedupe"] else "left"
    rows = [(f"{side}: rows", c["rows"]), (f"{side}: matched", c["matched"]),
            (f"{side}: every candidate below the threshold", c["below_threshold"]),
            (f"{side}: no candidate (no other row)", c["no_candidate"]),
            (f"{side}: null or empty names (skipped)", c["skipped"])]
    # a name that held NUL bytes is counted again here, beside the row's outcome above
    nul = manifest["stats"].get("nul_stripped", {})  # absent from versions before it was counted
    rows.append((f"names with NUL bytes stripped ({side})", nul.get("left", 0)))
    if not manifest["params"]["dedupe"]:
        rows += [("right: rows", r["rows"]), ("right: null or empty names (skipped)", r["skipped"]),
                 ("names with NUL bytes stripped (right)", nul.get("right", 0))]
    rows += [("candidate pairs (top k)", c["candidate_pairs"]), ("pairs kept", c["pairs"]),
             ("pairs below the threshold", c["pairs_below_threshold"])]
    return [{"count": what, "value": n} for what, n in rows]


def histogram_markdown(manifest: dict) -> str:
    from runs.figures import markdown_image, png_bytes, pyplot

    stats = manifest["stats"]
    counts = np.asarray(stats["histogram"]["counts"])
    edges = np.linspace(*stats["histogram"]["range"], len(counts) + 1)
    used = np.flatnonzero(counts)
    lo, hi = (edges[used[0]], edges[used[-1] + 1]) if len(used) else (-1.0, 1.0)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.stairs(counts, edges, fill=True)
    t = stats["threshold"]["value"]
    if t is not None:
        ax.axvline(t, color="red", linestyle="--", label=f"threshold {t:.3f}")
        ax.legend()
        lo, hi = min(lo, t - 0.05), max(hi, t + 0.05)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("score of each left row's best match (cosine)")
    ax.set_ylabel("left rows")
    return (f"# Scores of the best matches: {manifest['name']} {manifest['version']}\n\n"
            + markdown_image(png_bytes(fig), "score histogram") + "\n")


def summary_lines(manifest: dict, location: str) -> list[str]:
    """The end of a link run in the run's log: the threshold (and, chosen from labels, the precision and
    recall it reaches), how the left rows ended, the pairs kept, and where the dataset is."""
    from storage.datasets import as_location

    t, c = manifest["stats"]["threshold"], manifest["stats"]["counts"]
    if t["source"] == "labels":
        threshold = (f"threshold {t['value']:.4f}, chosen for precision {t['target']}: precision {t['precision']:.3f}, "
                     f"recall {t['recall']:.3f} on {t['labelled']} labelled left rows")
    elif t.get("value") is not None:
        threshold = f"threshold {t['value']:.4f} (given)"
    else:
        threshold = t["note"]
    return [threshold,
            f"left rows: {c['rows']:,} = {c['matched']:,} matched + {c['below_threshold']:,} below the threshold + "
            f"{c['no_candidate']:,} with no candidate + {c['skipped']:,} null or empty (skipped)",
            f"pairs kept: {c['pairs']:,} of {c['candidate_pairs']:,} candidates"
            + (f", {manifest['stats']['clusters']:,} clusters" if manifest["stats"].get("clusters") is not None else ""),
            f"dataset: {as_location(location)}"]


def threshold_markdown(manifest: dict) -> str:
    t = manifest["stats"]["threshold"]
    if t["source"] != "labels":
        return f"# Threshold\n\n{t['note']}.\n"
    from runs.figures import markdown_image, png_bytes, pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(t["curve"]["recall"], t["curve"]["precision"], marker=".")
    ax.scatter([t["recall"]], [t["precision"]], color="red", zorder=3, label=f"threshold {t['value']:.3f}")
    ax.axhline(t["target"], color="grey", linestyle=":")
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.legend()
    if "summary" in t:  # a version committed before the intervals were reported has none
        said = t["summary"][0].upper() + t["summary"][1:] + "."
        said += f"\n\n**Warning**: {t['warning']}." if t.get("warning") else ""
    else:
        said = (f"Precision {t['precision']:.3f}, recall {t['recall']:.3f} on {t['labelled']} left rows with a "
                f"labelled match ({t['note']}).")
    return (f"# Threshold {t['value']:.4f}, chosen for precision {t['target']}\n\n{said}\n\n"
            + markdown_image(png_bytes(fig), "precision/recall curve") + "\n")


def search_markdown(index: dict, k: int) -> str:
    """The efSearch an HNSW run used and, with a recall target, how it was chosen (empty for versions
    from before efSearch was reported)."""
    if index.get("ef_search") is None:
        return ""
    if not index.get("tuning"):
        target = index.get("recall_target")
        return f"\nefSearch {index['ef_search']}" + (
            f" (recall target {target}: not tuned, no left name to tune on).\n" if target else ".\n")
    worst = min(index["tuning"], key=lambda t: t["recall"])
    text = (f"\nefSearch **{index['ef_search']}**, chosen for recall@{k} >= {index['recall_target']} against exact "
            f"on every index (the largest each needed; per index: "
            + ", ".join(f"{t['ef_search']} ({t['recall']:.4f})" for t in index["tuning"]) + ").\n")
    if not index["target_met"]:
        text += (f"\n**Recall target {index['recall_target']} not reached**: index {worst['shard']} reaches "
                 f"{worst['recall']:.4f} at efSearch {worst['ef_search']}, the most tried; the run searched at it. "
                 "An exact index (index_kind exact) misses nothing.\n")
    return text


def index_markdown(manifest: dict) -> str:
    i = manifest["stats"]["index"]
    head = (f"# Index: {i['kind']}\n\n{i['right_names']} right names, {manifest['stats']['right']['parts']} "
            f"partitions; exact while the right side holds at most {i['exact_limit']} names.\n")
    if i["kind"] == "exact":
        return head + "\nEvery right name is scored for each query: nothing is missed.\n"
    head += search_markdown(i, manifest["params"]["top_k"])
    if i.get("recall") is None:
        return head + "\nThe recall against exact was not measured (recall_sample 0, or no left name).\n"
    return head + (f"\nRecall@{manifest['params']['top_k']} against exact: **{i['recall']:.4f}** (mean over the "
                   f"right side's indexes, on {i['recall_queries']} left names; per index: "
                   + ", ".join(f"{r:.4f}" for r in i["recall_per_part"]) + ").\n")


from prefect import task  # noqa: E402  (the wrappers below; the stage above needs no Prefect)
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402

from runs.artifacts import publish, publish_location  # noqa: E402
from runs.progress import log_summary  # noqa: E402


@task(name="plan-link", cache_policy=NONE)
def plan_link_task(left: str, right: str | None, storage_root: str, settings: dict) -> tuple[LinkPlan, dict | None]:
    """The plan, and the manifest of its version when it is already committed (then reused)."""
    plan = plan_link(left, right, storage_root, **settings)
    logger = get_run_logger()
    for note in plan.notes:
        logger.warning(note)
    logger.info("model %s; %s version %s", plan.model_name, plan.out.name, plan.out.version)
    if plan.out.is_complete():
        logger.info("%s %s is committed: reused", plan.out.name, plan.out.version)
        return plan, plan.out.reuse()
    start_work(plan)
    return plan, None


@task(name="split-side", task_run_name="split-{side}", cache_policy=NONE)
def split_side_task(plan: LinkPlan, side: str) -> SideParts:
    parts = split_side(plan, side)
    get_run_logger().info("%s: %d rows (%d null or empty) in %d partitions", redact(parts.source), parts.rows,
                          parts.skipped, parts.parts)
    return parts


@task(name="tuning-sample", cache_policy=NONE)
def tuning_sample_task(plan: LinkPlan, left: SideParts, right: SideParts) -> list[str]:
    sample = tuning_sample(plan, left, right)
    if sample:
        get_run_logger().info("%d left names tune efSearch to recall %s", len(sample), plan.recall_target)
    return sample


@task(name="encode-part", task_run_name="encode-{side}-{part}", cache_policy=NONE)
def encode_part_task(plan: LinkPlan, side: str, part: int, right: SideParts) -> int:
    return encode_part(plan, side, part, right)


@task(name="index-right", task_run_name="index-right-{shard}", cache_policy=NONE)
def index_right_task(plan: LinkPlan, shard: int, right: SideParts, sample: list[str]) -> dict:
    return index_right(plan, shard, right, sample)


@task(name="query-left", task_run_name="query-left-{part}", cache_policy=NONE)
def query_left_task(plan: LinkPlan, part: int, right: SideParts, shards: list[dict]) -> dict:
    return query_left(plan, part, right, shards)


@task(name="check-labels", cache_policy=NONE)
def check_labels_task(plan: LinkPlan, left: SideParts, right: SideParts) -> int:
    return check_labels(plan, left, right)


@task(name="choose-threshold", cache_policy=NONE)
def choose_threshold_task(plan: LinkPlan, left_parts: int) -> dict:
    chosen = choose_threshold(plan, left_parts)
    logger = get_run_logger()
    logger.info("%s", chosen.get("summary") or f"threshold {chosen['value']} ({chosen['note']})")
    if chosen.get("warning"):
        logger.warning("%s", chosen["warning"])
    return chosen


@task(name="write-matches", cache_policy=NONE)
def write_matches_task(plan: LinkPlan, left: SideParts, right: SideParts, threshold: dict,
                       recall: list[dict], shards: list[dict]) -> dict:
    search = search_settings(plan, right, shards)
    if search.get("target_met") is False:
        get_run_logger().warning("recall target %s not reached on every index at efSearch %d, the most tried: "
                                 "searched at it (the report gives the recall reached)", plan.recall_target,
                                 search["ef_search"])
    return write_matches(plan, left, right, threshold, {**recall_summary(recall), **search})


def read_command(storage_root: str, name: str, version: str) -> str:
    """A shell command that reads a dataset version whole and prints its first rows."""
    from shlex import quote

    from storage.datasets import as_location

    code = (f"from storage.datasets import Dataset; "
            f"print(Dataset({as_location(resolve_root(storage_root))!r}, {name!r}, {version!r}, None).read().slice(0, 5))")
    return f"python -c {quote(code)}"


@task(name="link-report", cache_policy=NONE)
def link_report_task(manifest: dict, storage_root: str) -> dict:
    """The artifacts: counts, the score histogram, examples around the threshold, the threshold (and
    its precision/recall curve with labels), the index and its recall, a link to the dataset."""
    stats = manifest["stats"]
    publish(create_table_artifact, counts_table(manifest), key="link-counts",
            description="How every left row ended (they add up to the rows), and the pairs")
    publish(create_markdown_artifact, histogram_markdown(manifest), key="link-scores",
            description="Histogram of each left row's best score, with the threshold")
    publish(create_table_artifact, [{k: (round(v, 4) if k == "score" else v) for k, v in e.items()}
                                    for e in stats["examples"]] or [{"note": "no match"}],
            key="link-examples", description="Best matches around the threshold (spread over the scores without one)")
    publish(create_markdown_artifact, threshold_markdown(manifest), key="link-threshold",
            description="The threshold: chosen from labels, given, or none (scores as they are)")
    publish(create_markdown_artifact, index_markdown(manifest), key="link-index",
            description="The vector index and, when approximate, its recall against exact")
    out = f"{resolve_root(storage_root).rstrip('/')}/{manifest['name']}/{manifest['version']}"
    log_summary(f"link: {manifest['name']} {manifest['version']}", summary_lines(manifest, out))
    publish_location(out, key="link-matches", title=f"{manifest['name']} {manifest['version']}",
                     commands=[read_command(storage_root, manifest["name"], manifest["version"])],
                     note="Parquet parts, read back through the storage's verified reader (from the checkout, "
                          "with its environment):", description="The matches dataset this run committed or reused")
    return {"dataset": manifest["name"], "version": manifest["version"], "rows": manifest["rows"],
            "counts": stats["counts"], "threshold": stats["threshold"]["value"], "index": stats["index"]["kind"],
            "recall": stats["index"].get("recall"), "ef_search": stats["index"].get("ef_search"),
            "clusters": stats.get("clusters")}
