"""Stage 5b (``ner_scope: examples``): `untyped_phrases` -> `phrases`, entity types from example sentences.

The mining pass of such a run parses with no NER (over half of spaCy's time, and mining is the
bottleneck of a full-Wikipedia build), so the phrase reducer's types are all OTHER. This stage
types each kept phrase as the mining pass would have, on its ``examples_per_phrase`` example
sentences only: the parser and NER run on those sentences, each occurrence of the phrase there
is one vote (the per-occurrence type of the mining pass), and the majority is its type (no vote: OTHER).
A full-Wikipedia build then runs NER on ~3 sentences per kept phrase (~11M for 3.8M phrases)
instead of 150M.

Three map steps, each reading what the one before wrote by bucket:
1. requests, per phrase bucket: each example sentence id to the group of sentences parts
   holding it (the parts' sentence_id ranges come from their Parquet footers; parts whose ranges
   overlap share a component, and a group is a run of components);
2. votes, per group: the group's requested sentences read once, parsed with NER, one vote per
   occurrence of a phrase requested in that sentence, bucketed by phrase;
3. types, per phrase bucket: the majority vote becomes the entity type and the label.

Counts: requests = matched + unmatched (an example sentence the parse no longer yields the
phrase in, or not found); phrases = typed by a vote + without one.

Each example sentence's typing (`sentence_types`: the (phrase key, entity type) of every occurrence
the mining pass with NER keeps in it, a function of its text) is kept in the `sentence_types` reuse
store (storage/reuse.py), so the next dump's build parses only the example sentences it has not
typed; a keys step over each group's requested sentences feeds `storage.reuse.match`, and the votes
step counts a group's votes from its sentences' typings by the same code either way.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pearl_model.phrases import labels
from pearl_model.phrases.entity_types import majority_entity_type
from pearl_model.phrases.mining import backends, check_stats, combine, mine_sentences, sentence_identity
from storage.datasets import Dataset, dataset_version
from storage.reuse import (
    Keys, ReuseStore, commit_store, content_key, encode_json, keys_of, library_versions, log_plan, plan_reuse,
    plan_store, reuse_part,
)
from storage.schemas import EXAMPLE_ENTITY_VOTES, EXAMPLE_REQUESTS, PHRASES

CODE_VERSION = "phrase-types-1"


@dataclass(frozen=True)
class TypingPlan:
    requests: Dataset
    votes: Dataset
    phrases: Dataset
    starts: tuple[int, ...]  # the smallest sentence id of each group (ascending)
    group_parts: tuple[tuple[int, ...], ...]  # the sentences parts of each group
    reuse: ReuseStore | None = None  # each example sentence's typing kept for the next build (None: nothing to do)


def id_range(sentences: Dataset, part: int) -> tuple[int, int] | None:
    """(min, max) sentence_id of one sentences part, from its footer when it has statistics."""
    meta = sentences.read_metadata(part)
    col = meta.schema.to_arrow_schema().get_field_index("sentence_id")
    stats = [meta.row_group(g).column(col).statistics for g in range(meta.num_row_groups)]
    if stats and all(s is not None and s.has_min_max for s in stats):
        return min(s.min for s in stats), max(s.max for s in stats)
    ids = sentences.read_part(part, columns=["sentence_id"])["sentence_id"]
    return (pc.min(ids).as_py(), pc.max(ids).as_py()) if len(ids) else None


def group_parts(ranges: list[tuple[str, int, int]], groups: int) -> tuple[tuple[int, ...], tuple[tuple[str, ...], ...]]:
    """Parts (file, min id, max id) -> at most ``groups`` runs of whole components of overlapping
    ranges, as (each run's smallest id, each run's files): an id routes to the last run starting
    at or below it, the only one that can hold it."""
    components: list[list] = []  # [lo, hi, files]
    for file, lo, hi in sorted(ranges, key=lambda r: (r[1], r[2])):
        if components and lo <= components[-1][1]:
            components[-1][1] = max(components[-1][1], hi)
            components[-1][2].append(file)
        else:
            components.append([lo, hi, [file]])
    n = min(groups, len(components))
    starts, files = [], []
    for c, (lo, _, fs) in enumerate(components):
        if c * n // len(components) == len(starts):
            starts.append(lo)
            files.append([])
        files[-1].extend(fs)
    return tuple(starts), tuple(tuple(f) for f in files)


def plan_types(untyped: Dataset, sentences: Dataset, params: dict, buckets: int) -> TypingPlan:
    def ds(name: str, schema: pa.Schema) -> Dataset:
        return Dataset(untyped.root, name, dataset_version(name, CODE_VERSION, params, _inputs(untyped, sentences)),
                       schema)

    ranges = [(p.index, *r) for p in sentences.parts() if (r := id_range(sentences, p.index)) is not None]
    starts, files = group_parts(ranges, buckets)
    phrases = ds("phrases", PHRASES)
    reuse = None if phrases.is_complete() else plan_store(untyped.root, "sentence_types", reuse_identity(params),
                                                           _inputs(untyped, sentences))
    return TypingPlan(ds("example_requests", EXAMPLE_REQUESTS), ds("example_entity_votes", EXAMPLE_ENTITY_VOTES),
                      phrases, starts, files, reuse)


def reuse_identity(params: dict) -> dict:
    """What one example sentence's typing is a function of besides its text: this code, the mining
    settings and NER model (`sentence_identity`, with the NER pass), the libraries' versions."""
    settings, libraries = sentence_identity(params, entities=True)
    return {"stage": "phrase_types", "code_version": CODE_VERSION, **settings,
            "libraries": library_versions(*libraries)}


def write_requests(untyped: Dataset, bucket: int, plan: TypingPlan) -> dict:
    """Step 1: one phrase bucket's example sentence ids, each to the group that holds it."""
    out = plan.requests
    if out.has_part(bucket):
        return {"bucket": bucket, "reused": True, **(out.part_metadata(bucket) or {})}
    t = untyped.read_part(bucket, columns=["phrase_key", "example_sentence_ids"])
    ids = pc.list_flatten(t["example_sentence_ids"])
    keys = t["phrase_key"].take(pc.list_parent_indices(t["example_sentence_ids"]))
    group = np.searchsorted(np.asarray(plan.starts, dtype=np.int64), ids.to_numpy(), side="right") - 1
    routed = group >= 0
    mask = pa.array(routed)
    table = pa.table({"bucket": pa.array(group[routed], pa.int32()), "sentence_id": ids.filter(mask),
                      "phrase_key": keys.filter(mask),
                      "phrase_bucket": pa.array(np.full(int(routed.sum()), bucket), pa.int32())})
    stats = {"requests": int(routed.sum()), "requests_unroutable": int((~routed).sum())}
    out.write_part(bucket, table, metadata=stats)
    return {"bucket": bucket, "reused": False, **stats}


@dataclass(frozen=True)
class SentenceTypes:
    """One sentence's typing: whether the parse took it, and the (phrase key, entity type) of each
    occurrence the mining pass with NER keeps in it (every phrase's: which are wanted varies by build)."""

    parsed: bool
    types: tuple[tuple[str, str], ...]


def sentence_types(texts: list[str], params: dict) -> list[SentenceTypes]:
    """Each sentence typed as the mining pass with NER types its occurrences."""
    parser, ner = backends(params)
    mined = mine_sentences(texts, parser, ner, max_sentence_chars=params["max_sentence_chars"],
                           min_words=params["min_words"], max_words=params["max_words"], language=params["language"])
    check_stats(combine(mined)[1])
    return [SentenceTypes(m.stats["sentences_parsed"] == 1, tuple((key, et) for _, key, _, et in m.occurrences))
            for m in mined]


def encode_types(t: SentenceTypes) -> bytes:
    return encode_json({"parsed": t.parsed, "types": t.types})


def decode_types(value: bytes) -> SentenceTypes:
    """A reuse entry's value back into a SentenceTypes, or ValueError / TypeError / KeyError: its
    entity types are the vocabulary's, and an unparsed sentence has none."""
    e = json.loads(value)
    if not isinstance(e, dict) or set(e) != {"parsed", "types"} or not isinstance(e["parsed"], bool) \
            or not isinstance(e["types"], list) or (e["types"] and not e["parsed"]):
        raise ValueError("not a sentence's typing")
    if not all(isinstance(o, list) and len(o) == 2 and isinstance(o[0], str) and o[1] in labels.ENTITY_TYPES
               for o in e["types"]):
        raise ValueError("not a sentence's typing")
    return SentenceTypes(e["parsed"], tuple((key, et) for key, et in e["types"]))


def group_sentences(group: int, plan: TypingPlan, sentences: Dataset) -> tuple[pa.Table, pa.Table]:
    """One group's requests and its requested sentences (sentence_id, text), in the order the keys
    and the votes steps both read them."""
    req = plan.requests.read_bucket(group, ["sentence_id", "phrase_key", "phrase_bucket"])
    wanted_ids = pa.array(sorted(set(req["sentence_id"].to_pylist())), pa.int64())
    pieces = [sentences.read_part(p, ["sentence_id", "text"], pc.field("sentence_id").isin(wanted_ids))
              for p in plan.group_parts[group]]
    sents = pa.concat_tables(pieces) if pieces else pa.table({"sentence_id": pa.array([], pa.int64()),
                                                              "text": pa.array([], pa.string())})
    return req, sents


def sentence_keys(group: int, plan: TypingPlan, sentences: Dataset) -> Keys:
    """The content keys of one group's requested sentences (a sentence is its text's key, its id the item)."""
    if plan.reuse is None or plan.reuse.entries.is_complete():  # nothing to type
        return keys_of((), (), ())
    _, sents = group_sentences(group, plan, sentences)
    return keys_of(range(sents.num_rows), sents["sentence_id"].to_pylist(),
                   map(content_key, sents["text"].to_pylist()))


def plan_sentence_reuse(plan: TypingPlan, keyed: list[Keys]) -> tuple[list[np.ndarray], dict]:
    """Per group, the sentences whose typing the previous store holds (`storage.reuse.match`), and the counts."""
    return plan_reuse(plan.reuse, keyed)


def write_votes(group: int, plan: TypingPlan, params: dict, sentences: Dataset, refs: np.ndarray | None = None) -> dict:
    """Step 2: one group's requested sentences typed (reused where ``refs``, this group's entry of
    `plan_sentence_reuse`, names the previous store's typing, else parsed with NER); their votes by
    phrase bucket. The store's part is written before the votes' part, which marks the group done."""
    out = plan.votes
    if out.has_part(group):
        return {"group": group, "reused": True, **(out.part_metadata(group) or {})}
    req, sents = group_sentences(group, plan, sentences)
    ids, texts = sents["sentence_id"].to_pylist(), sents["text"].to_pylist()
    position = {sid: i for i, sid in enumerate(ids)}
    wanted: list[set[str]] = [set() for _ in position]
    for sid, key in zip(req["sentence_id"].to_pylist(), req["phrase_key"].to_pylist()):
        if sid in position:
            wanted[position[sid]].add(key)
    each, reuse_counts = reuse_part(plan.reuse, group, refs, [content_key(t) for t in texts], ids,
                                    lambda todo: sentence_types([texts[i] for i in todo], params),
                                    encode_types, decode_types)
    found: list[dict[str, Counter]] = [defaultdict(Counter) for _ in texts]
    for i, t in enumerate(each):
        for key, et in t.types:
            if key in wanted[i]:
                found[i][key][et] += 1
    parse_stats = {"sentences_parsed": sum(t.parsed for t in each)}
    votes: Counter = Counter()
    matched = 0
    for sid, key, pb in zip(*(req[c].to_pylist() for c in ("sentence_id", "phrase_key", "phrase_bucket"))):
        hits = found[position[sid]].get(key, {}) if sid in position else {}
        matched += bool(hits)
        for et, n in hits.items():
            votes[(pb, key, et)] += n
    rows = [{"bucket": pb, "phrase_key": key, "entity_type": et, "count": n} for (pb, key, et), n in votes.items()]
    stats = {"requests_matched": matched, "requests_unmatched": req.num_rows - matched,
             "example_sentences": len(position), "votes": sum(votes.values()), **parse_stats}
    out.write_part(group, pa.Table.from_pylist(rows, schema=EXAMPLE_ENTITY_VOTES), metadata=stats)
    return {"group": group, "reused": False, **stats, "sentences_typed_reused": reuse_counts["reused"]}


def typed(rows: list[dict], votes: dict[str, Counter]) -> tuple[list[dict], dict]:
    """Untyped phrases with the majority vote of their examples as entity type (none: OTHER)."""
    out, n_typed = [], 0
    for r in rows:
        v = votes.get(r["phrase_key"])
        et = majority_entity_type(v) if v else labels.OTHER
        n_typed += bool(v)
        lab = labels.label(r["lexical_type"], et)
        out.append({**r, "entity_type": et, "label": lab, "label_id": labels.label_id(lab)})
    return out, {"phrases_typed_by_examples": n_typed, "phrases_without_example_vote": len(rows) - n_typed}


def write_types(untyped: Dataset, bucket: int, plan: TypingPlan) -> dict:
    """Step 3: one phrase bucket typed."""
    out = plan.phrases
    if out.has_part(bucket):
        return {"bucket": bucket, "reused": True, **(out.part_metadata(bucket) or {})}
    v = plan.votes.read_bucket(bucket, ["phrase_key", "entity_type", "count"])
    votes: dict[str, Counter] = defaultdict(Counter)
    for key, et, n in zip(*(v[c].to_pylist() for c in ("phrase_key", "entity_type", "count"))):
        votes[key][et] += n
    rows, stats = typed(untyped.read_part(bucket).to_pylist(), votes)
    out.write_part(bucket, pa.Table.from_pylist(rows, schema=PHRASES), metadata=stats)
    return {"bucket": bucket, "reused": False, **stats}


def _inputs(untyped: Dataset, sentences: Dataset) -> dict:
    return {"untyped_phrases": untyped.version, "sentences": sentences.version}


def commit_sentence_types(plan: TypingPlan, untyped: Dataset, sentences: Dataset, reuse_counts: dict) -> dict | None:
    """The reuse store's manifest (before the votes', so a run killed between the two finds both)."""
    return commit_store(plan.reuse, _inputs(untyped, sentences), reuse_counts) if plan.reuse is not None else None


def commit_step(out: Dataset, untyped: Dataset, sentences: Dataset, params: dict) -> dict:
    """Commit the requests or the votes (the next step reads them by bucket), their parts' counts summed."""
    if out.is_complete():
        return out.reuse()
    return out.commit(code_version=CODE_VERSION, params=params, inputs=_inputs(untyped, sentences),
                      stats=dict(out.metadata_totals()))


def commit_types(plan: TypingPlan, untyped: Dataset, sentences: Dataset, params: dict) -> dict:
    if plan.phrases.is_complete():
        return plan.phrases.reuse()
    requests, votes = plan.requests.manifest()["stats"], plan.votes.manifest()["stats"]
    if requests["requests"] != votes["requests_matched"] + votes["requests_unmatched"]:
        raise AssertionError(f"example requests do not reconcile: {requests} against {votes}")
    totals = plan.phrases.metadata_totals()
    stats = dict(untyped.manifest().get("stats") or {}) | requests | votes | {
        k: totals[k] for k in ("phrases_typed_by_examples", "phrases_without_example_vote")}
    return plan.phrases.commit(code_version=CODE_VERSION, params=params, inputs=_inputs(untyped, sentences),
                               stats=stats, extra={"labels": labels.vocabulary()})


from prefect import task, unmapped  # noqa: E402
from prefect.artifacts import create_table_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402

from runs.artifacts import publish  # noqa: E402
from runs.steps import PREFECT, Steps  # noqa: E402
from storage.reuse import counts_table  # noqa: E402


@task(name="plan-phrase-types", cache_policy=NONE)
def plan_types_task(untyped: Dataset, sentences: Dataset, params: dict, buckets: int) -> TypingPlan:
    plan = plan_types(untyped, sentences, params, buckets)
    if not plan.phrases.is_complete():
        backends(params)  # a missing model fails here, before any work is mapped
    return plan


@task(name="example-requests", task_run_name="example-requests-{bucket}", cache_policy=NONE, retries=1)
def requests_task(untyped: Dataset, bucket: int, plan: TypingPlan) -> dict:
    return write_requests(untyped, bucket, plan)


@task(name="example-sentence-keys", task_run_name="example-sentence-keys-{group}", cache_policy=NONE, retries=1)
def sentence_keys_task(group: int, plan: TypingPlan, sentences: Dataset) -> Keys:
    return sentence_keys(group, plan, sentences)


@task(name="plan-sentence-type-reuse", cache_policy=NONE)
def plan_sentence_reuse_task(plan: TypingPlan, keyed: list[Keys]) -> tuple[list[np.ndarray], dict]:
    refs, counts = plan_sentence_reuse(plan, keyed)
    log_plan(plan.reuse, counts, "example sentence typing", get_run_logger())
    return refs, counts


@task(name="example-votes", task_run_name="example-votes-{group}", cache_policy=NONE, retries=1)
def votes_task(group: int, plan: TypingPlan, params: dict, sentences: Dataset, refs: np.ndarray) -> dict:
    return write_votes(group, plan, params, sentences, refs)


@task(name="commit-sentence-types", cache_policy=NONE)
def commit_sentence_types_task(plan: TypingPlan, untyped: Dataset, sentences: Dataset, reuse_counts: dict) -> None:
    if commit_sentence_types(plan, untyped, sentences, reuse_counts) is not None:
        publish(create_table_artifact, counts_table(plan.reuse.entries.manifest()["stats"]), key="sentence-type-reuse",
                description="Example sentences whose NER typing was reused from the previous build's sentence_types, "
                            "and computed")


@task(name="phrase-types", task_run_name="phrase-types-{bucket}", cache_policy=NONE, retries=1)
def types_task(untyped: Dataset, bucket: int, plan: TypingPlan) -> dict:
    return write_types(untyped, bucket, plan)


@task(name="commit-phrase-types-step", cache_policy=NONE)
def commit_typing_step_task(out: Dataset, untyped: Dataset, sentences: Dataset, params: dict) -> dict:
    return commit_step(out, untyped, sentences, params)


@task(name="commit-phrase-types", cache_policy=NONE)
def commit_types_task(plan: TypingPlan, untyped: Dataset, sentences: Dataset, params: dict) -> dict:
    return commit_types(plan, untyped, sentences, params)


def phrase_types_stage(untyped: Dataset, sentences: Dataset, params: dict, buckets: int, *,
                       steps: Steps = PREFECT) -> tuple[Dataset, dict, ReuseStore | None]:
    """The stage in its flow: untyped_phrases -> phrases, entity types from example sentences.
    Returns the phrases, their manifest and the `sentence_types` store it wrote (None: nothing to type)."""
    steps.stage("phrase_types")
    steps.load(backends, params, in_flow=True)  # the plan loads them too
    plan = steps.call(plan_types_task, untyped, sentences, params, buckets)
    steps.map(requests_task, unmapped(untyped), range(buckets), unmapped(plan))
    steps.call(commit_typing_step_task, plan.requests, untyped, sentences, params)
    keyed = steps.map(sentence_keys_task, range(len(plan.starts)), unmapped(plan), unmapped(sentences))
    refs, counts = steps.call(plan_sentence_reuse_task, plan, keyed)
    steps.map(votes_task, range(len(plan.starts)), unmapped(plan), unmapped(params), unmapped(sentences), refs)
    steps.call(commit_sentence_types_task, plan, untyped, sentences, counts)
    steps.call(commit_typing_step_task, plan.votes, untyped, sentences, params)
    steps.map(types_task, unmapped(untyped), range(buckets), unmapped(plan))
    return plan.phrases, steps.call(commit_types_task, plan, untyped, sentences, params), plan.reuse
