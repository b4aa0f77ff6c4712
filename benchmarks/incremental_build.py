"""An incremental corpus build against one from scratch: "next month's" dump made by a seeded edit of
a share of the pages, both builds timed stage by stage, their datasets compared, and the full
English Wikipedia projected.

    python scripts/ovos_to_jsonl.py data/inputs/ovos_summaries.jsonl
    python benchmarks/incremental_build.py run --source sample --source data/inputs/ovos_summaries.jsonl \\
        --max-pages 400 --shares 0.02,0.05,0.2,0.4 --out benchmarks/results/incremental_build_cpu.json
    python benchmarks/incremental_build.py project benchmarks/results/incremental_build_cpu.json

`run`: dump N is the first `--max-pages` pages of the inputs (XML pages as they are; JSON-lines
records given ids, so that a removed record does not move the ids of those after it). For each
share s, dump N+1 changes round(s * N) pages, drawn with `--seed`: half are edited (a sentence of
a page not in N inserted at a random line or sentence boundary, as a real edit touches a small
part of a page), a quarter removed, a quarter added (the next records of the JSON-lines input).
Dump N is built once from scratch; then for each share dump N+1 is built twice, each run as
benchmarks/stage_rates.py runs one (`run_in_subprocess`: the flow's wiring, its tasks on a fresh
Dask LocalCluster, per-stage wall and CPU seconds): from scratch on an empty storage root, and
incrementally on a copy of N's root (its datasets and reuse stores). The two builds' datasets are
compared by content digest (`storage.contents.dataset_contents`) and their versions; the reuse
counts and the estimated time saved come from the stores the incremental build wrote
(`tasks.reuse_report`).

`project`: the full English dump on `--cores` cores. The full build's hours per stage are
stage_rates.py's projection (`project_stages`, of `--stage-rates`, the current defaults' run,
with the paper's 3.8M phrases); an incremental build's hours are, for each stage that reused
(wrote a reuse store), those times the CPU seconds ratio incremental / from scratch measured here
at each share, and for every other stage the full hours: it recomputes in full (a reusing stage
under `--min-s` CPU seconds from scratch too: its ratio is timer noise). The share
of pages that changes between two consecutive English dumps is not measured here, so the
projection is given for each measured share.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import shutil
import sys
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stage_rates  # noqa: E402  (benchmarks/ is on sys.path)

app = typer.Typer(add_completion=False)
JSON_ID_BASE = 10**8  # ids of JSON-lines records: clear of the sample's page ids
STAGE_RATES = Path("benchmarks/results/stage_rates_pmi_examples_tagpos_sample_ovos_2000_6000.json")
PAPER_PHRASES = 3.8e6  # benchmarks/results/published_tables.json: paper_corpus.phrases_millions
METHOD = ("dump N+1 = dump N with a seeded share of its pages changed (1/2 edited by one inserted sentence, "
          "1/4 removed, 1/4 added); each build as benchmarks/stage_rates.py runs one (the flow's wiring, a fresh "
          "Dask LocalCluster, per-stage wall and CPU seconds, no Prefect server); from scratch on an empty storage "
          "root, incrementally on a copy of dump N's root; datasets compared by content digest")
_TEXT = re.compile(rb"(<text\b[^>]*>)(.*?)(</text>)", re.S)


# --- the dumps ------------------------------------------------------------------------------
def read_pages(sources: list[str], max_pages: int, reserve: int) -> tuple[list[dict], list[dict], list[bytes]]:
    """Dump N's pages (the first `max_pages` over the sources, in order), the JSON-lines records after
    them (`reserve` of them: the pages a later dump adds, and the sentences an edit inserts), and
    each source's XML header. A page: {"source": index, "kind": "xml" | "json", "data": block or record}."""
    from tasks.raw_pages.xml_dump import detect_format, resolve_source

    pages, extra, headers, left = [], [], [], max_pages
    for n, source in enumerate(sources):
        path = resolve_source(source)
        if detect_format(path) == "mediawiki-xml":
            header, blocks = stage_rates.read_xml_pages(path, left)
            headers.append(header)
            pages += [{"source": n, "kind": "xml", "data": b} for b in blocks]
            left -= len(blocks)
            continue
        headers.append(b"")
        records = stage_rates.read_jsonl_records(path, left + reserve)
        records = [dict(r, id=r.get("id", JSON_ID_BASE * (n + 1) + i)) for i, r in enumerate(records)]
        pages += [{"source": n, "kind": "json", "data": r} for r in records[:left]]
        extra += [{"source": n, "kind": "json", "data": r} for r in records[left:]]
        left -= min(left, len(records))
    return pages, extra, headers


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= 5]


def edit_page(page: dict, sentence: str, rng: random.Random) -> dict:
    """The page with `sentence` inserted at a random line (wikitext) or sentence (plain text) boundary."""
    if page["kind"] == "json":
        parts = re.split(r"(?<=[.!?])\s+", page["data"]["text"])
        parts.insert(rng.randrange(len(parts) + 1), sentence)
        return {**page, "data": {**page["data"], "text": " ".join(parts)}}
    m = _TEXT.search(page["data"])
    lines = m.group(2).split(b"\n")
    lines.insert(rng.randrange(len(lines) + 1), escape(sentence).encode())
    return {**page, "data": page["data"][:m.start(2)] + b"\n".join(lines) + page["data"][m.end(2):]}


def next_dump(pages: list[dict], extra: list[dict], share: float, seed: int) -> tuple[list[dict], dict]:
    """Dump N+1: round(share * N) pages changed, half edited, a quarter removed, a quarter added."""
    rng = random.Random(f"{seed}:{share}")
    changed = round(share * len(pages))
    removed = changed // 4
    added = min(changed // 4, max(len(extra) - 1, 0))
    edited = changed - removed - added
    # edits go to articles (a page with text, not a redirect), removals to any page
    articles = [i for i, p in enumerate(pages) if p["kind"] == "json" or (
        _TEXT.search(p["data"]) is not None and b"<redirect" not in p["data"])]
    edits = set(rng.sample(articles, edited))
    removes = set(rng.sample([i for i in range(len(pages)) if i not in edits], removed))
    donors = [s for p in extra[added:] for s in _sentences(p["data"]["text"])]
    if edited and not donors:
        raise ValueError("no sentence to insert: give a JSON-lines input with more records than --max-pages")
    out = [edit_page(p, rng.choice(donors), rng) if i in edits else p
           for i, p in enumerate(pages) if i not in removes]
    return out + extra[:added], {"pages_n": len(pages), "changed": changed, "edited": edited, "removed": removed,
                                 "added": added, "pages_n1": len(out) + added}


def write_dump(pages: list[dict], headers: list[bytes], out_dir: Path) -> list[str]:
    """One input per source, in the sources' order (an empty one left out)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, header in enumerate(headers):
        mine = [p for p in pages if p["source"] == n]
        if not mine:
            continue
        if mine[0]["kind"] == "xml":
            path = out_dir / f"input{n}.xml"
            path.write_bytes(header + b"\n" + b"".join(p["data"] + b"\n" for p in mine) + b"</mediawiki>\n")
        else:
            path = out_dir / f"input{n}.jsonl"
            path.write_text("".join(json.dumps(p["data"], ensure_ascii=False) + "\n" for p in mine), encoding="utf-8")
        paths.append(str(path))
    return paths


# --- the builds -----------------------------------------------------------------------------
def stage_times(run: dict) -> list[dict]:
    return [{k: st[k] for k in ("stage", "wall_s", "cpu_s", "core_s", "load_s")} for st in run["stages"]]


def compare(full: dict, incremental: dict, full_root: str, inc_root: str) -> dict:
    """The two builds' datasets: same versions, and the same rows (content digests) per dataset."""
    from storage.contents import dataset_contents

    a = dataset_contents(full_root, full["versions"])
    b = dataset_contents(inc_root, incremental["versions"])
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return {"same_versions": full["versions"] == incremental["versions"], "same_contents": not differ,
            "datasets": len(a), "differ": differ, "rows": {k: v["rows"] for k, v in sorted(a.items())}}


def per_stage(full: dict, incremental: dict) -> list[dict]:
    inc = {st["stage"]: st for st in incremental["stages"]}
    rows = []
    for st in full["stages"]:
        other = inc.get(st["stage"], {})
        rows.append({"stage": st["stage"], "full_wall_s": st["wall_s"], "incremental_wall_s": other.get("wall_s"),
                     "full_cpu_s": st["cpu_s"], "incremental_cpu_s": other.get("cpu_s"),
                     "cpu_ratio": round(other["cpu_s"] / st["cpu_s"], 3) if other and st["cpu_s"] else None})
    return rows


@app.command()
def run(
    source: list[str] = typer.Option(["sample", "data/inputs/ovos_summaries.jsonl"],
                                     help="inputs, read in order; the last JSON-lines one supplies added pages"),
    max_pages: int = typer.Option(400, help="pages of dump N"),
    shares: str = typer.Option("0.02,0.05,0.2,0.4", help="comma-separated shares of pages changed"),
    seed: int = typer.Option(0),
    workers: int = typer.Option(1, help="Dask workers of each build"),
    pages_per_partition: int = typer.Option(50),
    sentences_per_chunk: int = typer.Option(1000),
    param: list[str] = typer.Option([], help="more build-corpus parameters, key=JSON"),
    quiet: bool = typer.Option(False, help="say the machine did nothing else during the run (recorded)"),
    cores: int = typer.Option(64, help="cores of the projection"),
    out: Path = typer.Option(Path("benchmarks/results/incremental_build_cpu.json")),
) -> None:
    """Build dump N, then per share dump N+1 from scratch and incrementally; compare and time them."""
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run_in_subprocess's cleanup ends its builds
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from storage.datasets import git_commit

    overrides = {"pages_per_partition": pages_per_partition, "sentences_per_chunk": sentences_per_chunk,
                 **stage_rates.parse_overrides(param)}
    share_list = [float(s) for s in shares.split(",")]
    results = {"setup": {"method": METHOD, "machine": stage_rates.machine(), "quiet": quiet,
                         "command": " ".join(["python", "benchmarks/incremental_build.py", *sys.argv[1:]]),
                         "source": source, "max_pages": max_pages, "seed": seed, "workers": workers,
                         "overrides": overrides, "git_commit": git_commit(),
                         "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")},
               "shares": []}

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str))

    pages, extra, headers = read_pages(source, max_pages, reserve=max_pages)
    with tempfile.TemporaryDirectory(prefix="incremental_build_") as tmp:
        base = Path(tmp)
        inputs_n = write_dump(pages, headers, base / "dump-n")
        typer.echo(f"## dump N: {len(pages)} pages, from scratch")
        first = stage_rates.run_in_subprocess(inputs_n, workers, str(base / "root-n"), overrides, 0.05)
        results["dump_n"] = {"pages": len(pages), "wall_s": first["wall_s"], "stages": stage_times(first),
                             "counts": first["counts"]}
        save()
        for share in share_list:
            n1, changes = next_dump(pages, extra, share, seed)
            inputs = write_dump(n1, headers, base / f"dump-{share}")
            typer.echo(f"## share {share}: {json.dumps(changes)}")
            full_root, inc_root = str(base / f"full-{share}"), str(base / f"incremental-{share}")
            full = stage_rates.run_in_subprocess(inputs, workers, full_root, overrides, 0.05)
            shutil.copytree(base / "root-n", inc_root)
            inc = stage_rates.run_in_subprocess(inputs, workers, inc_root, overrides, 0.05)
            from tasks.reuse_report import page_changes, stage_rows

            one = {"share": share, "changes": changes,
                   "full": {"wall_s": full["wall_s"], "stages": stage_times(full)},
                   "incremental": {"wall_s": inc["wall_s"], "stages": stage_times(inc)},
                   "wall_ratio": round(inc["wall_s"] / full["wall_s"], 3),
                   "stages": per_stage(full, inc),
                   "reuse": {"pages": page_changes(inc_root, inc["reuse_stores"]),
                             "stages": stage_rows(inc_root, inc["reuse_stores"])},
                   "equal": compare(full, inc, full_root, inc_root)}
            results["shares"].append(one)
            typer.echo(f"full {full['wall_s']} s, incremental {inc['wall_s']} s; equal: {one['equal']['same_contents']}"
                       f" {one['equal']['differ']}; reuse: {json.dumps(one['reuse']['pages'])}")
            shutil.rmtree(full_root)  # the next share's builds need the disk more than these
            shutil.rmtree(inc_root)
            save()
    results["setup"]["machine"]["load_avg_end"] = os.getloadavg()
    results["projection"] = projection(results, STAGE_RATES, cores)
    save()
    typer.echo(projection_markdown(results["projection"]))
    typer.echo(f"wrote {out}")


# --- the projection -------------------------------------------------------------------------
def projection(results: dict, rates: Path, cores: int = 64, phrases: float = PAPER_PHRASES, min_s: float = 1.0) -> dict:
    """Hours for full enwiki on `cores` cores: from scratch (stage_rates.project_stages), and per
    measured share incrementally: a stage that reused (it wrote a reuse store) at its hours times
    its measured CPU ratio; every other stage recomputes in full (its ratio's departure from 1 is
    noise), as does a reusing stage under `min_s` CPU seconds from scratch."""
    proj = stage_rates.project_stages(json.loads(rates.read_text()), cores, phrases=phrases)
    key = proj["headline"]
    full = {s["stage"]: s[key] for s in proj["stages"]}
    out = []
    for one in results["shares"]:
        measured = {s["stage"]: s for s in one["stages"]}
        reusing = {r["stage"] for r in one["reuse"]["stages"]}
        stages = []
        for stage, hours in full.items():
            m = measured.get(stage)
            clean = stage in reusing and m is not None and m["cpu_ratio"] is not None and m["full_cpu_s"] >= min_s
            ratio = m["cpu_ratio"] if clean else 1.0
            stages.append({"stage": stage, "hours_full": hours, "cpu_ratio": ratio, "measured": clean,
                           "hours_incremental": hours * ratio})
        total = sum(s["hours_incremental"] for s in stages)
        out.append({"share": one["share"], "share_pct": round(100 * one["share"], 1), "hours_full": sum(full.values()),
                    "hours_incremental": total, "saved_pct": 100 * (1 - total / sum(full.values())),
                    "stages": stages})
    return {"cores": cores, "stage_rates": str(rates), "phrases": phrases, "basis": key, "min_s": min_s,
            "hours_full": sum(full.values()), "by_share": out,
            "share_source": ("not measured: two consecutive English dumps (or their multistream indexes) are not at "
                             "hand here, and no published share was found; given for each measured share")}


def projection_markdown(proj: dict) -> str:
    rows = [[f"{p['share_pct']}%", f"{p['hours_full']:.2f}", f"{p['hours_incremental']:.2f}", f"{p['saved_pct']:.0f}%"]
            for p in proj["by_share"]]
    return stage_rates.markdown(rows, ["pages changed", f"h from scratch ({proj['cores']} cores)", "h incremental",
                                       "saved"])


@app.command()
def project(results: Path = typer.Argument(...), rates: Path = typer.Option(STAGE_RATES), cores: int = typer.Option(64),
            phrases: float = typer.Option(PAPER_PHRASES), min_s: float = typer.Option(1.0),
            save: bool = typer.Option(True, help="write the projection into the results file")) -> None:
    """Project a `run`'s measurement to full enwiki (also done at the end of `run`)."""
    data = json.loads(results.read_text())
    data["projection"] = projection(data, rates, cores, phrases, min_s)
    typer.echo(projection_markdown(data["projection"]))
    if save:
        results.write_text(json.dumps(data, indent=2, default=str))


if __name__ == "__main__":
    app()
