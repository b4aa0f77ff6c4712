"""`--help` of every `pearl` command and group, found in the click command tree (a new command is
checked without being named here): it exits 0, shows each option's default beside its own help,
wraps at the terminal's width without cutting a word, and labels no flag <bool>."""
from __future__ import annotations

import re

import pytest
import typer

from pearl_cli.main import app
from pearl_model.linking.request import COSINE_WEIGHT


def commands(command, path=()):
    """(the words that name it, the click command) for the command and all below it."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from commands(sub, (*path, name))


COMMANDS = list(commands(typer.main.get_command(app)))
WIDTHS = (80, 200)


@pytest.fixture
def help_of(capsys, monkeypatch):
    """`pearl PATH --help` as a terminal COLUMNS wide shows it (typer's CliRunner would force 80)."""
    def run(path, width: int) -> str:
        monkeypatch.setenv("COLUMNS", str(width))
        with pytest.raises(SystemExit) as done:
            app([*path, "--help"], prog_name="pearl")
        out = capsys.readouterr().out
        assert done.value.code == 0, out
        return out
    return run


def flat(text: str) -> str:
    """The text with its line wrapping undone: a line broken after a hyphen joins the next one's word."""
    return " ".join(re.sub(r"-\n\s+", "-", text).split())


def test_the_tree_has_the_commands_and_groups():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"", "link", "encode", "models", "models list"} <= names


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(p) or "pearl" for p, _ in COMMANDS])
def test_help_shows_every_help_text_whole_with_its_default(help_of, path, command, width):
    out = help_of(path, width)
    assert "<bool>" not in out
    assert max(map(len, out.splitlines())) <= width
    text = flat(out)
    assert flat(command.help or "") in text
    for param in command.params:
        help_text = flat(getattr(param, "help", None) or "")
        assert help_text in text, f"{param.name}: {help_text!r} is not whole in\n{out}"
        if param.default is not None and not getattr(param, "is_flag", False):
            shown = re.escape(f"{help_text} [default: {param.default}".strip()) + r"[;\]]"
            assert re.search(shown, text), f"{param.name}: its default {param.default!r} is not shown in\n{out}"
    for name, sub in getattr(command, "commands", {}).items():  # a group's list: each summary whole
        summary = flat(sub.get_short_help_str(limit=10**6))
        assert f"{name} {summary}" in text and not summary.endswith("..."), f"{name}: {summary!r} cut in\n{out}"


def test_link_help_uses_a_wide_terminal_and_shows_the_cosine_weight_whole(help_of):
    out = help_of(["link"], 200)
    assert max(map(len, out.splitlines())) > 100  # not wrapped at 80 columns
    entry = flat(out).split("--cosine-weight", 1)[1].split("--labels", 1)[0]
    option = next(p for p in dict(COMMANDS)[("link",)].params if p.name == "cosine_weight")
    assert flat(option.help).endswith("docs/research/eval-link-autofj.md)") and flat(option.help) in entry
    assert f"[default: {COSINE_WEIGHT};" in entry



@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(p) or "pearl" for p, _ in COMMANDS])
def test_usage_line_is_plain_and_no_option_has_two_long_names(help_of, path, command):
    out = help_of(path, 200)
    usage = out.splitlines()[0]
    assert "{" not in usage and "[[" not in usage, usage  # typer's `{LEFT}`, a metavar bracketed twice
    for param in command.params:
        if not getattr(param, "hidden", False) and param.param_type_name == "option":
            assert len([o for o in param.opts + param.secondary_opts if o.startswith("--")]) == 1, param.opts
    assert "--backbone" not in out and not re.search(r"\bhub\b", out, re.I)  # the old name hidden; no hub offered


def test_usage_lines_name_the_arguments(help_of):
    assert help_of(["link"], 200).splitlines()[0].endswith("link [OPTIONS] LEFT [RIGHT]")
    assert help_of(["encode"], 200).splitlines()[0].endswith("encode [OPTIONS] [PHRASES]...")


@pytest.mark.parametrize("command", ["encode", "similar", "link"])
def test_model_help_says_the_fallback_before_any_promotion(help_of, command):
    from pearl_model.inference.backbones import DEFAULT_BACKBONE

    entry = flat(help_of([command], 200)).split("--model", 1)[1].split("[default: current]", 1)[0]
    assert f"before any promotion, the backbone {DEFAULT_BACKBONE}" in entry


def test_threshold_help_says_what_happens_without_one(help_of):
    entry = flat(help_of(["link"], 200)).split("--threshold", 1)[1].split("--cosine-weight", 1)[0]
    assert "default: none, every match is kept" in entry


def test_the_old_model_option_name_still_works_and_two_names_are_refused():
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["encode", "x", "--backbone", "a", "--model", "b"], prog_name="pearl")
    assert r.exit_code == 2 and "give one (--backbone is --model's old name)" in r.output
