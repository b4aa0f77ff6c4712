"""The ``README.md`` every PEARL export carries: what the model is, how it was made, how to load it.

Written from ``pearl_model.json`` alone (the export's config: dims, prefix, averaging, and the
metadata the train task records: training-set version, backbone, parameters, summary), so the
card and the weights never disagree. Benchmark rows appear when the metadata holds them
(``metadata["benchmark"]``: dataset -> score x100, beside the backbone's under
``metadata["backbone_benchmark"]``); the paper's rows are printed for reference.
"""
from __future__ import annotations

import json

from pearl_model.evaluation import DATASETS, PAPER_ROWS

__all__ = ["model_card"]

def _cell(v) -> str:
    return "" if v is None else f"{float(v):.1f}"


def _benchmark(meta: dict) -> str:
    rows = []
    if meta.get("benchmark"):
        rows.append(("this model", [meta["benchmark"].get(d) for d in DATASETS]))
    if meta.get("backbone_benchmark"):
        rows.append((f"backbone ({meta.get('backbone', '?')})", [meta["backbone_benchmark"].get(d) for d in DATASETS]))
    # The paper's YAGO/UMLS used the full 572K/750K-name dictionaries: not comparable with ours.
    rows += [(f"{name} (paper)", [None if d.endswith("10kdict") else row.get(d) for d in DATASETS])
             for name, row in PAPER_ROWS.items()]
    head = "| model | " + " | ".join(DATASETS) + " |\n|---|" + "---:|" * len(DATASETS) + "\n"
    note = "" if meta.get("benchmark") else \
        ("\nThis model's own row is not in the card: score it with the `evaluate` flow (its table sits in the "
         "Prefect UI and in the model registry).\n")
    return head + "".join(f"| {name} | " + " | ".join(_cell(v) for v in vals) + " |\n" for name, vals in rows) + note


def model_card(config: dict) -> str:
    meta = config.get("metadata") or {}
    params = meta.get("params") or {}
    summary = meta.get("summary") or {}
    char = config["char_proj_dim"]
    averaged = config.get("average_weight")
    facts = [("format", config["format"]), ("vector", f"{config['dim']} floats = {config['backbone_dim']} backbone"
                                            + (f" + {char} character branch" if char else " (no character branch)")),
             ("backbone", meta.get("backbone", "?")), ("training set", meta.get("training_set", "?")),
             ("character encoder", meta.get("char_encoder", "?")),
             ("weight averaging", f"{averaged} x fine-tuned + {1 - averaged:g} x original" if averaged is not None
              else "none"),
             ("query prefix", repr(config["query_prefix"])), ("max length", f"{config['max_length']} tokens"),
             ("training", ", ".join(f"{k} {summary[k]}" for k in ("steps", "train_phrases", "seconds", "device")
                                    if k in summary) or "?")]
    lines = "\n".join(f"| {k} | {v} |" for k, v in facts)
    param_text = json.dumps({k: v for k, v in params.items() if k != "cache_dir"}, indent=1, sort_keys=True)
    return f"""---
library_name: sentence-transformers
pipeline_tag: sentence-similarity
tags: [phrase-embeddings, pearl, sentence-transformers]
---
# PEARL phrase encoder

A phrase embedding model trained by pearl-pipeline after PEARL (Chen et al., EACL 2024): the
backbone's mean-pooled vector of `"{config['query_prefix']}" + phrase`, concatenated with a
character-level vector of the phrase's words (robust to misspellings), L2-normalised.

| | |
|---|---|
{lines}

## Use

```python
from sentence_transformers import SentenceTransformer   # this project need not be installed
model = SentenceTransformer("path/to/this/directory", device="cpu", trust_remote_code=True)
vectors = model.encode(["heart attack", "myocardial infarction"])
```

**This directory is code.** sentence-transformers imports `st_module.py` and `network.py` from
it (sentence-transformers 5.7 does so for a local directory even without `trust_remote_code`):
load only a copy you trust. `checksums.sha256` lists every file's sha256: check a copy with
`pearl verify DIR`, or `sha256sum -c checksums.sha256` inside it.

With pearl-pipeline installed: `pearl encode --model DIR` (ONNX Runtime on CPU by default) or
`pearl_model.inference.export.load_pearl(DIR).encode([...])`; `pearl distill DIR` makes a static model2vec version.

**Not the PEARL vector:** `transformers.AutoModel.from_pretrained(DIR)` loads the
{"weight-averaged " if averaged is not None else ""}backbone alone; mean-pooled, it gives the first
{config['backbone_dim']} dimensions of the PEARL vector before normalisation, without the character branch.
Use sentence-transformers or `load_pearl` for the model's vectors.

## Benchmark (x100)

{_benchmark(meta)}
## Intended use and limits

Short English phrases (names, noun phrases, terms of 1-{config['max_words']} words): entity
retrieval, fuzzy joins, record linkage, clustering. Not trained for sentences or paragraphs
(they are truncated at {config['max_length']} tokens and lose the character branch's signal past
{config['max_words']} words); not multilingual beyond what the backbone brings. It learned from
Wikipedia-derived phrases and their automatic positives (aliases, synonyms, edits), with their noise.

## Licence

The training phrases come from Wikipedia text, licensed CC BY-SA 4.0 (and GFDL): phrases and
their examples taken from it keep that licence's attribution and share-alike terms. The weights
are fine-tuned from and averaged with the backbone named above, under the backbone's own licence
(multilingual-e5-small: MIT; all-MiniLM-L6-v2: Apache-2.0). The code that
trained it, pearl-pipeline, is MIT-licensed.

## Training parameters

```json
{param_text}
```
"""
