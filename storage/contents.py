"""What a build wrote, reduced to rows and a checksum per dataset: equal contents, equal digests
(an incremental build and one from scratch are compared by them: the tests, benchmarks/incremental_build.py).

Rows are hashed in a canonical order (sorted JSON lines; floats to 4 significant digits: an
engine's last bits are not contents), so the digest does not depend on how the rows were cut
into parts or on the order Dask finished them."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .datasets import Dataset


def _canonical(value):
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def dataset_contents(root: str | Path, versions: dict[str, str], leave_out: dict[str, list[str]] | None = None
                     ) -> dict[str, dict]:
    """{dataset: {"rows": n, "sha256": digest of its rows}} for each committed dataset version named
    (its parts through `Dataset.parts`); ``leave_out``: columns of a dataset the digest does not cover."""
    out, leave_out = {}, leave_out or {}
    for name, version in sorted(versions.items()):
        ds = Dataset(str(root), name, version, None)
        rows = [json.dumps(_canonical(r), sort_keys=True, default=str) for part in ds.parts()
                for r in ds.read_part(part.index).drop_columns(leave_out.get(name, [])).to_pylist()]
        out[name] = {"rows": len(rows), "sha256": hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()}
    return out
