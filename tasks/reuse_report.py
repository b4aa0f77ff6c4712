"""What a build reused from the previous one, and the time that saved: the `corpus-reuse` artifact.

Read back from the reuse stores the build wrote (storage/reuse.py: page_extracts, sentence_mining,
sentence_types, phrase_positives, phrase_vectors), whose manifests hold the counts: the pages new,
edited, unchanged, moved and removed against the previous build, the date of the dump read and of
the previous build's (an older dump, or one of the same date but another input, is said: reuse is
by content, so either is reused from correctly), and per per-item stage the items reused and
computed and the CPU seconds its tasks spent computing them (`storage.reuse.cpu_timed`). The
time saved is an estimate: the stage's measured cost per computed item (its tasks' compute CPU
seconds / items computed) times the items it reused. The cost per item is taken from this run or
the previous build (its store's manifest), whichever computed more items: a few items carry a
task's fixed costs (a batch's set-up: one sentence mined cost as much as a hundred, measured), so
the larger count is the better estimate; the report says which it used. It is the compute
avoided, not net of reading the reused entries from the store. The seconds are CPU
seconds of one-thread worker processes, summed over workers: on n busy workers the wall time
saved is about 1/n of them.
"""
from __future__ import annotations

from storage.datasets import Dataset
from storage.schemas import REUSE_ENTRIES

PAGE_CHANGES = ("new", "edited", "unchanged", "moved", "removed")


def store_stats(root: str, name: str, version: str) -> dict:
    return Dataset(root, name, version, REUSE_ENTRIES).manifest()["stats"]


def cost_per_item(stats: dict, previous: dict | None, previous_version: str | None) -> tuple[float | None, str]:
    """(CPU seconds per computed item, where it was measured): this run's or the previous build's,
    whichever computed more items (and measured them: a store of older code has no compute_s)."""
    measured = [(s["computed"], s["compute_s"] / s["computed"], label) for s, label in (
        (stats, "this run"), (previous or {}, f"the previous build ({previous_version})"))
        if s.get("computed") and s.get("compute_s")]
    if not measured:
        return None, "not measured"
    n, per_item, label = max(measured, key=lambda m: m[0])
    return per_item, f"{label}, {n} items computed"


def stage_rows(root: str, stores: dict[str, list[str]]) -> list[dict]:
    """One row per stage that wrote a store: ``stores`` maps the stage to its store's (name, version)."""
    rows = []
    for stage, (name, version) in stores.items():
        stats = store_stats(root, name, version)
        previous = store_stats(root, name, stats["previous"]) if stats.get("previous") else None
        per_item, basis = cost_per_item(stats, previous, stats.get("previous"))
        rows.append({"stage": stage, "store": name, "items": stats["keyed"], "reused": stats["reused"],
                     "computed": stats["computed"], "refused": stats["refused"], "compute_s": stats.get("compute_s", 0),
                     "s_per_item": per_item, "saved_s": None if per_item is None else stats["reused"] * per_item,
                     "cost_from": basis,
                     "previous": stats.get("previous"), "previous_refused": stats.get("previous_refused")})
    return rows


def page_changes(root: str, stores: dict[str, list[str]]) -> dict | None:
    """The pages against the previous build (None when the pages stage wrote no store: nothing new read)."""
    if "pages" not in stores:
        return None
    stats = store_stats(root, *stores["pages"])
    return {k: stats[k] for k in PAGE_CHANGES}


def dump_dates(root: str, stores: dict[str, list[str]]) -> dict | None:
    """The date of the dump this build read and of the one the previous build's page_extracts was
    made from (from the files' names: None where unknown), and their order as the pages stage
    counted it: "older", "same date" (another input), or None (None when no pages store was written)."""
    if "pages" not in stores:
        return None
    manifest = Dataset(root, *stores["pages"], REUSE_ENTRIES).manifest()
    stats, previous = manifest["stats"], manifest["stats"].get("previous")
    before = Dataset(root, stores["pages"][0], previous, REUSE_ENTRIES).manifest()["inputs"] if previous else {}
    order = "older" if stats.get("older_dump") else "same date" if stats.get("same_date_dump") else None
    return {"dump_date": manifest["inputs"].get("dump_date"), "previous_dump_date": before.get("dump_date"),
            "order": order}


def dump_line(dump: dict | None) -> list[str]:
    if dump is None or (dump["dump_date"] is None and dump["previous_dump_date"] is None):
        return []
    date, before = dump["dump_date"] or "not in its file name", dump["previous_dump_date"] or "unknown"
    if dump["order"] == "older":
        return [f"**Older dump: yes**, dump date {date} < the previous build's {before} (the files' names). Its "
                "pages were reused by content, unchanged text only, so the datasets are this dump's all the same.", ""]
    if dump["order"] == "same date":
        return [f"**Same dump date, another input**: {date}, as the previous build's, read into other raw_pages "
                "(another file of that date, or other read settings). Reused by content as any other.", ""]
    return [f"Dump date {date}; the previous build's {before} (the files' names).", ""]


def reuse_markdown(rows: list[dict], pages: dict | None, dump: dict | None = None) -> str:
    lines = ["# What this build reused", ""]
    if not rows:
        return "\n".join(lines + ["Every per-item stage's datasets were already committed for this input: "
                                  "nothing was recomputed."])
    if pages is not None:
        lines += ["| pages since the previous build | count |", "|---|---|",
                  *(f"| {k} | {pages[k]} |" for k in PAGE_CHANGES), ""]
    lines += dump_line(dump)
    lines += ["| stage | items | reused | computed | refused | compute CPU s | s per item | saved s (estimate) | "
              "cost per item from |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per_item = "-" if r["s_per_item"] is None else f"{r['s_per_item']:.4f}"
        saved = "-" if r["saved_s"] is None else f"{r['saved_s']:.1f}"
        lines.append(f"| {r['stage']} | {r['items']} | {r['reused']} | {r['computed']} | {r['refused']} | "
                     f"{r['compute_s']:.2f} | {per_item} | {saved} | {r['cost_from']} |")
    total = sum(r["saved_s"] or 0 for r in rows)
    lines += ["", f"Estimated time saved: **{total:.1f} s** of task time: per stage, its measured compute "
              "CPU seconds per computed item (this run's or the previous build's, whichever computed more items: "
              "a few carry a task's fixed costs) times the items it reused: the compute avoided, not net of reading the "
              "store; summed over the workers, one task at a "
              "time each: on n busy workers about 1/n of it in wall time."]
    for r in rows:
        if r["previous_refused"]:
            lines.append(f"\n{r['store']}: the previous store was not reused: {r['previous_refused']}")
    return "\n".join(lines)


from prefect import task  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402

from runs.artifacts import publish  # noqa: E402


@task(name="corpus-reuse", cache_policy=NONE)
def reuse_report_task(stores: dict[str, list[str]], storage_root: str) -> dict:
    """The `corpus-reuse` artifact on the build-corpus run; returns its rows, the pages' changes, the
    dumps' dates and ``dump_order``: those dates when the dump is older than the previous build's or
    of its date but another input, else None."""
    rows, pages, dump = stage_rows(storage_root, stores), page_changes(storage_root, stores), \
        dump_dates(storage_root, stores)
    publish(create_markdown_artifact, reuse_markdown(rows, pages, dump), key="corpus-reuse",
            description="Pages new, edited, unchanged, moved and removed since the previous build, and the dumps' "
                        "dates; per stage the items reused and computed, and the time the reuse saved (estimated)")
    return {"stages": rows, "pages": pages, "dump": dump, "saved_s": sum(r["saved_s"] or 0 for r in rows),
            "dump_order": dump if dump is not None and dump["order"] is not None else None}
