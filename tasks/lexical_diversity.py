"""Stage: lexical diversity of each scored model's nearest neighbours among the corpus's phrases.

Phrase-BERT's measure (`pearl_model.evaluation.diversity`) on a fixed sample of the corpus in
``storage_root``: queries are phrases that have aliases (redirects, both ways) first, then the
most frequent others; candidates are the most frequent phrases plus every alias of a query (so
an alias can be found). Link anchors are left out of the aliases: they name what a sentence
points at ("then" -> a kingdom) and would count wrong neighbours as right. The sample depends
only on the corpus, so every model of a run, and of later runs on the same corpus, is measured
on the same phrases.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from storage.datasets import Dataset, latest_version, resolve_root
from storage.schemas import ALIASES, PHRASES

K, QUERIES, CANDIDATES, EXAMPLES = 10, 300, 10_000, 3


@dataclass
class DiversitySample:
    queries: list[str]
    candidates: list[str]
    aliases: dict[str, set[str]] = field(repr=False)  # phrase -> its redirect aliases / titles
    setup: dict = field(default_factory=dict)


class NoCorpus(LookupError):
    """The storage root has no published phrases or aliases to draw the sample from."""


def diversity_sample(storage_root: str, queries: int = QUERIES, candidates: int = CANDIDATES) -> DiversitySample:
    root = resolve_root(storage_root)
    versions = {name: latest_version(root, name) for name in ("phrases", "aliases")}
    missing = [name for name, v in versions.items() if v is None]
    if missing:
        raise NoCorpus(f"no published {' or '.join(missing)} under {storage_root}: build the corpus first")
    phrases = Dataset(root, "phrases", versions["phrases"], PHRASES)
    aliases = Dataset(root, "aliases", versions["aliases"], ALIASES)
    frequent = phrases.read(columns=["phrase", "frequency"]).sort_by(
        [("frequency", "descending"), ("phrase", "ascending")]).column("phrase").to_pylist()
    names: dict[str, set[str]] = defaultdict(set)
    for r in aliases.read(columns=["alias", "title", "source"]).to_pylist():
        if r["source"] == "redirect" and r["alias"] != r["title"]:
            names[r["title"]].add(r["alias"])
            names[r["alias"]].add(r["title"])
    chosen = ([p for p in frequent if p in names] + [p for p in frequent if p not in names])[:queries]
    pool = list(dict.fromkeys(frequent[:candidates] + chosen + [a for q in chosen for a in sorted(names.get(q, ()))]))
    setup = {"phrases": phrases.version, "aliases": aliases.version, "queries": len(chosen),
             "candidates": len(pool), "queries_with_aliases_in_corpus": sum(q in names for q in chosen),
             "phrases_in_dataset": len(frequent), "k": K}
    return DiversitySample(chosen, pool, dict(names), setup)


def measure(encoder, sample: DiversitySample, k: int = K, examples: int = EXAMPLES) -> dict:
    """``{"scores": {metric: value}, "examples": [...]}`` of one encoder on the sample."""
    from pearl_model.evaluation.diversity import lexical_diversity

    rows, shown = lexical_diversity(encoder, sample.queries, sample.candidates, k=k, aliases=sample.aliases,
                                    examples=examples)
    return {"scores": {r["metric"]: round(r["value"], 2) for r in rows}, "examples": shown}


def diversity_table(results: dict[str, dict], k: int = K) -> list[dict]:
    return [{"model": m, f"diverse@{k}": r["scores"][f"diverse@{k}"], f"alias_hit@{k}": r["scores"][f"alias_hit@{k}"],
             "queries": r["scores"]["queries"], "queries_with_aliases": r["scores"]["queries_with_aliases"],
             "candidates": r["scores"]["candidates"]} for m, r in results.items()]


def diversity_markdown(results: dict[str, dict], setup: dict, k: int = K) -> str:
    lines = ["# Lexical diversity of nearest neighbours", "",
             f"Corpus `phrases` {setup['phrases']}, `aliases` {setup['aliases']}: {setup['queries']} query phrases "
             f"({setup['queries_with_aliases_in_corpus']} with redirect aliases) among {setup['candidates']} "
             f"candidates. `diverse@{k}`: share (x100) of a query's {k} nearest candidates that share no content "
             f"word with it; `alias_hit@{k}`: share that are one of its known aliases. High on the first and "
             "low on the second is scatter, not meaning: read them together.", "",
             f"| model | diverse@{k} | alias_hit@{k} |", "|---|---|---|"]
    lines += [f"| {t['model']} | {t[f'diverse@{k}']:.1f} | {t[f'alias_hit@{k}']:.1f} |" for t in diversity_table(results, k)]
    for model, r in results.items():
        lines += ["", f"## {model}: example neighbour lists", ""]
        for ex in r["examples"]:
            lines.append(f"- **{ex['query']}** (aliases: {', '.join(ex['aliases'])}): " + "; ".join(
                f"*{n}*" if n in ex["aliases"] else n for n in ex["neighbours"]))
    return "\n".join(lines)


def gives_vectors(encoder) -> bool:
    """Neighbours need vectors: a model with only ``similarity`` (the character 3-gram baseline)
    is left out, by the rule AutoFJ scoring uses to tell the two kinds apart."""
    return hasattr(encoder, "encode")


from prefect import task  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402
from prefect.logging import get_run_logger  # noqa: E402


@task(name="lexical-diversity", cache_policy=NONE)
def lexical_diversity_task(models: list[str], storage_root: str, cache_dir: str | None) -> dict | None:
    from pearl_model.inference.loading import load_encoder
    from storage.registry import loadable_spec

    logger = get_run_logger()
    try:
        sample = diversity_sample(storage_root)
    except NoCorpus as e:
        logger.warning("lexical diversity skipped: %s", e)
        return None
    results = {}
    for spec in models:
        encoder = load_encoder(loadable_spec(spec), cache_dir)
        if gives_vectors(encoder):
            results[spec] = measure(encoder, sample)
            logger.info("%s: %s", spec, results[spec]["scores"])
    create_table_artifact(diversity_table(results), key="lexical-diversity",
                          description="nearest-neighbour lexical diversity and alias hits, x100")
    create_markdown_artifact(diversity_markdown(results, sample.setup), key="lexical-diversity-report",
                             description="lexical diversity with example neighbour lists")
    return {"setup": sample.setup, "models": results}
