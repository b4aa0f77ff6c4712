"""Stage 9: `phrases` + `augmentations` + `negatives` (+ `heldout_aliases`) -> `training_set`, published.

The three inputs share their partitioning (part i holds the phrases of bucket i), so each
part is joined on its own, with no shuffle. The split is a hash of the phrase key, so a
phrase stays on its side of the split when the corpus grows. The training flow reads the
version named in `training_set/_latest.json` unless it is given one.

Held-out aliases (the corpus's own validation signal, scored as alias -> title retrieval by
the training flow): the articles whose salted crc32 of the title falls in
``alias_holdout_fraction`` are chosen, and their unambiguous aliases (an alias text naming
one title only) go to `heldout_aliases`. Neither side of a held-out pair is trained on: a
phrase that is one of them keeps its row with split ``heldout`` (neither trained nor
validated on), and it is removed from every other phrase's positives. Hard negatives are
left as they are: a negative pushes a text away from a look-alike and never pairs an alias
with its title.
"""
from __future__ import annotations

from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from pearl_model.phrases import labels
from pearl_model.phrases.mining import phrase_key
from storage.buckets import in_share
from storage.datasets import Dataset, dataset_version
from storage.schemas import HELDOUT_ALIASES, TRAINING_SET

CODE_VERSION = "training-set-2"  # -2: held-out aliases (split "heldout", removed from positives)
HELDOUT_CODE_VERSION = "heldout-aliases-1"
_HOLDOUT_SALT = "alias-holdout:"  # decorrelates the held-out articles from the phrase split's hash


def split_of(key: str, validation_fraction: float) -> str:
    return "validation" if in_share(key, validation_fraction) else "train"


def title_held_out(title: str, fraction: float) -> bool:
    return in_share(_HOLDOUT_SALT + title, fraction)


# --- held-out aliases ----------------------------------------------------------------------

def heldout_part(aliases: pa.Table, fraction: float) -> tuple[pa.Table, Counter]:
    """The held-out pairs of one aliases part (aliases are partitioned by alias text, so an
    alias's every title is in its part), and how many aliases of held-out titles were ambiguous."""
    titles = [t for t in pc.unique(aliases["title"]).to_pylist() if title_held_out(t, fraction)]
    chosen = aliases.filter(pc.is_in(aliases["title"], pa.array(titles, pa.string())))
    # Every title these alias texts name (a small selection of the part), to drop ambiguous ones.
    named = aliases.filter(pc.is_in(aliases["alias"], chosen["alias"])).select(["alias", "title"]).to_pylist()
    titles_of: dict[str, set] = defaultdict(set)
    for r in named:
        titles_of[phrase_key(r["alias"])].add(r["title"])
    kept = [r for r in chosen.to_pylist() if len(titles_of[phrase_key(r["alias"])]) == 1]
    stats = Counter(pairs=len(kept), ambiguous_aliases_not_held_out=chosen.num_rows - len(kept))
    return pa.Table.from_pylist(kept, schema=HELDOUT_ALIASES), stats


def plan_heldout_aliases(aliases: Dataset, params: dict) -> Dataset:
    return Dataset(aliases.root, "heldout_aliases",
                   dataset_version("heldout_aliases", HELDOUT_CODE_VERSION, params, {"aliases": aliases.version}),
                   HELDOUT_ALIASES)


def build_heldout_aliases(aliases: Dataset, out: Dataset, params: dict) -> dict:
    """One held-out part per aliases part (a selection: small), then the manifest."""
    if out.is_complete():
        return out.reuse()
    stats: Counter = Counter(pairs=0, ambiguous_aliases_not_held_out=0)
    titles: set[str] = set()
    for i, part in enumerate(aliases.parts()):
        table, counts = heldout_part(aliases.read_part(part.index), params["alias_holdout_fraction"])
        stats.update(counts)
        titles.update(table["title"].to_pylist())
        out.write_part(i, table)
    return out.commit(code_version=HELDOUT_CODE_VERSION, params=params, inputs={"aliases": aliases.version},
                      stats={**stats, "titles": len(titles)})


def heldout_keys(heldout: Dataset) -> frozenset[str]:
    """Phrase keys of both sides of every held-out pair: what training must not see."""
    t = heldout.read(columns=["alias", "title"])
    return frozenset(phrase_key(x) for c in ("alias", "title") for x in t[c].to_pylist())


# --- the join --------------------------------------------------------------------------------

def _part(d: Dataset, i: int, columns: list[str]) -> pa.Table:
    return d.read_part(i, columns=columns) if d.has_part(i) else d.schema.empty_table().select(columns)


def join_part(phrases: Dataset, augmentations: Dataset, negatives: Dataset, part: int, params: dict,
              held_out: frozenset[str] = frozenset()) -> tuple[pa.Table, dict]:
    """The part's rows, and how many positives of the phrases trained on were removed for naming a
    held-out alias or title (a held-out phrase's row keeps its own: it is not trained on)."""
    p = _part(phrases, part, ["phrase", "phrase_key", "label", "label_id", "frequency"])
    a = _part(augmentations, part, ["phrase_key", "kind", "positive", "rank", "sentence_id"])
    n = _part(negatives, part, ["phrase_key", "negative", "rank"])
    positives: dict[str, list] = defaultdict(list)
    removed = 0
    for key, kind, text, rank, sid in sorted(zip(*(a[c].to_pylist() for c in ("phrase_key", "kind", "positive", "rank",
                                                                             "sentence_id"))),
                                             key=lambda r: (r[0], r[1], r[3])):
        if held_out and key not in held_out and phrase_key(text) in held_out:
            removed += 1
        else:
            positives[key].append({"kind": kind, "text": text, "sentence_id": sid})
    negs: dict[str, list] = defaultdict(list)
    for key, text, rank in sorted(zip(*(n[c].to_pylist() for c in ("phrase_key", "negative", "rank"))),
                                  key=lambda r: (r[0], r[2])):
        negs[key].append(text)
    rows = [{**r, "positives": positives.get(r["phrase_key"], []), "negatives": negs.get(r["phrase_key"], []),
             "split": "heldout" if r["phrase_key"] in held_out else split_of(r["phrase_key"],
                                                                              params["validation_fraction"])}
            for r in p.to_pylist()]
    return pa.Table.from_pylist(rows, schema=TRAINING_SET), {"positives_held_out": removed}


def write_part(phrases: Dataset, augmentations: Dataset, negatives: Dataset, part: int, out: Dataset,
               params: dict, heldout: Dataset | None = None) -> int:
    if out.has_part(part):
        return -1
    table, counts = join_part(phrases, augmentations, negatives, part, params,
                              heldout_keys(heldout) if heldout is not None else frozenset())
    return out.write_part(part, table, metadata=counts)  # the counts stay with the part (resumed runs)


def _inputs(phrases: Dataset, augmentations: Dataset, negatives: Dataset, heldout: Dataset | None) -> dict:
    inputs = {"phrases": phrases.version, "augmentations": augmentations.version, "negatives": negatives.version}
    return inputs | ({"heldout_aliases": heldout.version} if heldout is not None else {})


def plan_training_set(phrases: Dataset, augmentations: Dataset, negatives: Dataset, params: dict,
                      heldout: Dataset | None = None) -> Dataset:
    inputs = _inputs(phrases, augmentations, negatives, heldout)
    return Dataset(phrases.root, "training_set", dataset_version("training_set", CODE_VERSION, params, inputs),
                   TRAINING_SET)


def commit_training_set(out: Dataset, phrases: Dataset, augmentations: Dataset, negatives: Dataset,
                        params: dict, heldout: Dataset | None = None) -> dict:
    if out.is_complete():
        return out.reuse()
    stats: Counter = Counter({"phrases_heldout": 0, "positives_held_out": 0})
    for part in out.written_parts():
        t = out.read_part(part, columns=["split", "positives", "negatives"])
        stats.update(f"phrases_{s}" for s in t["split"].to_pylist())
        stats["phrases_without_cached_positive"] += sum(1 for x in t["positives"].to_pylist() if not x)
        stats["phrases_without_negative"] += sum(1 for x in t["negatives"].to_pylist() if not x)
    stats["positives_held_out"] += out.metadata_totals().get("positives_held_out", 0)
    return out.commit(code_version=CODE_VERSION, params=params, stats=dict(stats),
                      inputs=_inputs(phrases, augmentations, negatives, heldout), extra={"labels": labels.vocabulary()})


from prefect import task, unmapped  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402

from runs.artifacts import publish_location, train_command  # noqa: E402
from runs.steps import PREFECT, Steps  # noqa: E402


@task(name="heldout-aliases", cache_policy=NONE)
def heldout_aliases_task(aliases: Dataset, params: dict) -> Dataset:
    """The held-out aliases (a small selection: one task reads the aliases part by part)."""
    out = plan_heldout_aliases(aliases, params)
    build_heldout_aliases(aliases, out, params)
    return out


@task(name="plan-training-set", cache_policy=NONE)
def plan_training_set_task(phrases: Dataset, augmentations: Dataset, negatives: Dataset, params: dict,
                           heldout: Dataset | None = None) -> Dataset:
    return plan_training_set(phrases, augmentations, negatives, params, heldout)


@task(name="training-set-part", task_run_name="training-set-part-{part}", cache_policy=NONE, retries=1)
def training_set_part_task(phrases: Dataset, augmentations: Dataset, negatives: Dataset, part: int, out: Dataset,
                           params: dict, heldout: Dataset | None = None) -> int:
    return write_part(phrases, augmentations, negatives, part, out, params, heldout)


@task(name="publish-training-set", cache_policy=NONE)
def commit_training_set_task(out: Dataset, phrases: Dataset, augmentations: Dataset, negatives: Dataset,
                             params: dict, heldout: Dataset | None = None) -> dict:
    man = commit_training_set(out, phrases, augmentations, negatives, params, heldout)
    publish_location(out.url, key="training-set", title=f"training_set {out.version}",
                     commands=[train_command(out.root, out.version)], description=f"{man['rows']} phrases: {man['stats']}")
    return man


def training_set_stage(phrases: Dataset, augmentations: Dataset, negatives: Dataset, aliases: Dataset, params: dict,
                       buckets: int, *, steps: Steps = PREFECT) -> tuple[Dataset, dict, Dataset]:
    """The stage in its flow: phrases + augmentations + negatives (aliases: the held-out ones
    first) -> training_set, one task per phrase bucket, then published; returns the training
    set, its manifest and the held-out aliases."""
    steps.stage("training_set")
    heldout = steps.call(heldout_aliases_task, aliases, {"alias_holdout_fraction": params["alias_holdout_fraction"]})
    training = steps.call(plan_training_set_task, phrases, augmentations, negatives, params, heldout)
    steps.map(training_set_part_task, unmapped(phrases), unmapped(augmentations), unmapped(negatives), range(buckets),
              unmapped(training), unmapped(params), unmapped(heldout))
    published = steps.call(commit_training_set_task, training, phrases, augmentations, negatives, params, heldout)
    return training, published, heldout
