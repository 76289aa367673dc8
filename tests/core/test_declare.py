"""bigearthnet.core.declare: a command's options generated from one dataclass, checked the
same way when parsed and when a library caller builds the object."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from bigearthnet.cli.common import Parser, run
from bigearthnet.core.declare import add_options, check_fields, from_args, nested, option
from bigearthnet.core.errors import ConfigError, require_positive, require_positive_int


@dataclass(frozen=True)
class Inner:
    run_dir: Path | None = option(None, "a run", metavar="RUN")
    size: float = option(1.5, "a size", check=require_positive)


@dataclass(frozen=True)
class Command:
    inner: Inner = nested(Inner)
    source: Path = option(help="the input", positional=True, metavar="SRC")
    out: Path = option(help="the output", metavar="DIR")
    count: int = option(3, "how many", check=require_positive_int)
    kind: str = option("a", "which", choices=("a", "b"))
    splits: tuple[str, ...] | None = option(None, "splits", choices=("train", "test"))
    words: tuple[str, ...] = option(("x", "y"), "words", parse=lambda t: tuple(t.split(",")))
    force: bool = option(False, "replace")
    progress: bool = option(True, "a bar")

    def __post_init__(self) -> None:
        check_fields(self)


def _parse(argv: list[str]) -> Command:
    parser = Parser(prog="demo")
    add_options(parser, Command)
    return from_args(Command, parser.parse_args(argv))


def test_defaults_come_from_the_declaration_and_flags_override_them() -> None:
    cmd = _parse(["in.tif", "--out", "o"])
    assert cmd == Command(inner=Inner(), source=Path("in.tif"), out=Path("o"))
    cmd = _parse(["in.tif", "--out", "o", "--count", "5", "--kind", "b", "--splits", "train",
                  "test", "--words", "p,q,r", "--force", "--no-progress", "--size", "2",
                  "--run-dir", "R"])  # fmt: skip
    assert (cmd.count, cmd.kind, cmd.splits, cmd.words) == (5, "b", ("train", "test"),
                                                            ("p", "q", "r"))  # fmt: skip
    assert cmd.force and not cmd.progress and cmd.inner == Inner(Path("R"), 2.0)


def test_help_shows_every_default_once() -> None:
    parser = Parser(prog="demo")
    add_options(parser, Command)
    text = parser.format_help()
    assert "how many (default: 3)" in text and "words (default: x,y)" in text
    assert "replace (default: off)" in text and "a bar (default: on)" in text


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--count", "0"], "argument --count: must be a positive integer, got 0"),
        (["--count", "2.5"], "argument --count: invalid int value: '2.5'"),
        (["--size", "nan"], "argument --size: must be positive, got nan"),
        (["--size", "inf"], "argument --size: must be positive, got inf"),
        (["--size", "-1"], "argument --size: must be positive, got -1.0"),
        (["--kind", "c"], "argument --kind: invalid choice: 'c'"),
        ([], "the following arguments are required: --out"),
    ],
)
def test_a_bad_flag_is_one_line_exit_2(flags, message, reported_errors) -> None:
    def handler(args):
        raise AssertionError("not reached")

    parser = Parser(prog="demo")
    add_options(parser, Command)
    argv = ["in.tif", *(["--out", "o"] if flags else []), *flags]
    assert run(parser, handler, argv) == 2
    err = reported_errors()
    assert len(err) == 1 and message in err[0], err


def test_a_library_caller_gets_the_same_checks() -> None:
    with pytest.raises(ConfigError, match="--count must be a positive integer, got -1"):
        Command(inner=Inner(), source=Path("s"), out=Path("o"), count=-1)
    with pytest.raises(ConfigError, match="--splits 'val': expected one of train, test"):
        Command(inner=Inner(), source=Path("s"), out=Path("o"), splits=("train", "val"))
