"""Parser "pmi" (ULR n-grams) against the spaCy default on the same corpus sentences.

    python benchmarks/pmi_phrases.py /work/corpus14 --sentences 20000 --per-core 2000

1. per core: `mine()` (screening + pipeline + candidates + typing) with each parser on the same
   ``--per-core`` sentences, one process, one thread: sentences/s.
2. phrases: the map and reduce stages (`tasks.phrase_occurrences`, `tasks.phrases`) in this
   process on ``--sentences`` hash-chosen sentences of the storage root's latest `sentences`,
   each parser at ``min_freq``: phrases kept, the multi-word share, the overlap of the two
   sets of phrase keys, the PMI filter's counts, and a few phrases each finds alone.
The model trained on each is measured by building the corpus with ``parser=pmi`` and training
(docs/research/data-parsers.md).
"""
from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

import typer

app = typer.Typer(add_completion=False)


def pick_sentences(root: str, n: int) -> list[str]:
    import pyarrow.compute as pc

    from storage.buckets import stable_hash
    from storage.datasets import Dataset, latest_version
    from storage.schemas import SENTENCES

    version = latest_version(root, "sentences")
    if version is None:
        raise typer.BadParameter(f"no sentences dataset under {root}: build the corpus first")
    t = Dataset(root, "sentences", version, SENTENCES).read(columns=["sentence_id", "text"])
    order = sorted(range(t.num_rows), key=lambda i: stable_hash(str(t["sentence_id"][i].as_py())))
    return pc.take(t["text"], order[:n]).to_pylist()


def per_core(texts: list[str], parser_name: str, max_words: int) -> dict:
    from pearl_model.phrases.mining import make_ner, make_parser, mine

    options = {"max_words": max_words} if parser_name == "pmi" else {}
    parser = make_parser(parser_name, **options)
    list(parser.parse(texts[:100]))  # warm-up
    t0 = time.perf_counter()
    _, stats = mine(texts, parser, make_ner("spacy"), max_words=max_words)
    wall = time.perf_counter() - t0
    return {"sentences_per_s": round(len(texts) / wall, 1),
            "occurrences_per_sentence": round(stats["occurrences_found"] / max(stats["sentences_parsed"], 1), 2)}


def run_stages(texts: list[str], parser_name: str, tmp: str, min_freq: int, min_npmi: float, max_words: int) -> dict:
    import pyarrow as pa

    from storage.datasets import Dataset
    from storage.schemas import SENTENCES
    from tasks import phrase_occurrences as occ
    from tasks import phrases as ph

    root = f"{tmp}/{parser_name}"
    sentences = Dataset(root, "sentences", "bench", SENTENCES)
    sentences.write_part(0, pa.Table.from_pylist([{"sentence_id": i, "page_id": 1, "index": i, "text": t}
                                                  for i, t in enumerate(texts)], schema=SENTENCES))
    sentences.commit(code_version="bench", params={}, inputs={})
    p = {"parser": parser_name, "parser_options": {}, "ner": "spacy", "ner_options": {}, "language": "en",
         "max_sentence_chars": 600, "min_words": 1, "max_words": max_words, "phrase_buckets": 8,
         "examples_per_phrase": 3, "sentences_per_chunk": 2000}
    out = occ.plan_outputs(sentences, p)
    for chunk in occ.plan_chunks(sentences, p["sentences_per_chunk"]):
        occ.write_chunk(sentences, chunk, out, p)
    occ.commit_outputs(out, sentences, p)
    totals, rp = None, {"min_freq": min_freq, "examples_per_phrase": 3}
    if out.word_counts is not None:
        wp = {"min_freq": min_freq}
        totals = ph.plan_word_totals(out.word_counts, wp)
        for b in range(p["phrase_buckets"]):
            ph.write_word_totals(out.word_counts, b, totals, wp)
        ph.commit_word_totals(totals, out.word_counts, wp)
        rp["pmi_min_npmi"] = min_npmi
    phrases = ph.plan_phrases(out.occurrences, rp, totals)
    stats = [ph.write_bucket(out.occurrences, b, phrases, rp, totals) for b in range(p["phrase_buckets"])]
    man = ph.commit_phrases(phrases, out.occurrences, rp, stats, totals)
    t = phrases.read(columns=["phrase_key", "frequency", "label"])
    return {"keys": dict(zip(t["phrase_key"].to_pylist(), t["frequency"].to_pylist())),
            "labels": dict(zip(t["phrase_key"].to_pylist(), t["label"].to_pylist())), "stats": man["stats"]}


@app.command()
def main(storage_root: str, sentences: int = typer.Option(20000), per_core_sentences: int = typer.Option(2000),
         min_freq: int = typer.Option(2), min_npmi: float = typer.Option(0.3), max_words: int = typer.Option(8),
         out: Path = typer.Option(Path("benchmarks/results/pmi_phrases_sample_ovos.json"))):
    import torch

    torch.set_num_threads(1)
    texts = pick_sentences(storage_root, max(sentences, per_core_sentences))
    result = {"setup": {"storage_root": storage_root, "sentences": sentences, "per_core_sentences": per_core_sentences,
                        "min_freq": min_freq, "pmi_min_npmi": min_npmi, "max_words": max_words,
                        "machine": f"{platform.machine()}, {os.cpu_count()} cores, one process"}}
    for name in ("spacy", "pmi"):
        result[f"per_core_{name}"] = per_core(texts[:per_core_sentences], name, max_words)
        print(name, result[f"per_core_{name}"], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        found = {name: run_stages(texts[:sentences], name, tmp, min_freq, min_npmi, max_words)
                 for name in ("spacy", "pmi")}
    s, p = set(found["spacy"]["keys"]), set(found["pmi"]["keys"])
    multi = {name: {k for k in found[name]["keys"] if " " in k} for name in found}
    by_freq = lambda keys, name: sorted(keys, key=lambda k: -found[name]["keys"][k])[:25]  # noqa: E731
    result["phrases"] = {
        name: {"kept": len(found[name]["keys"]), "multi_word": len(multi[name]), "stats": found[name]["stats"]}
        for name in found}
    result["overlap"] = {"both": len(s & p), "jaccard": round(len(s & p) / max(len(s | p), 1), 3),
                         "share_of_spacy_found_by_pmi": round(len(s & p) / max(len(s), 1), 3),
                         "multi_word_both": len(multi["spacy"] & multi["pmi"]),
                         "share_of_spacy_multi_word_found_by_pmi":
                             round(len(multi["spacy"] & multi["pmi"]) / max(len(multi["spacy"]), 1), 3)}
    result["examples"] = {"pmi_only_multi_word": by_freq(multi["pmi"] - multi["spacy"], "pmi"),
                          "spacy_only_multi_word": by_freq(multi["spacy"] - multi["pmi"], "spacy")}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "examples"}, indent=1))


if __name__ == "__main__":
    app()
