"""bigearthnet.core.declare: a command's options generated from one dataclass, checked the
same way when parsed and when a library caller builds the object."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from bigearthnet.cli.common import Parser, run
from bigearthnet.core.declare import (
    add_options,
    check_fields,
    from_args,
    group,
    nested,
    option,
    resolve,
    reuse,
    to_mapping,
)
from bigearthnet.core.errors import (
    ConfigError,
    UsageError,
    require_positive,
    require_positive_int,
)


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
    with pytest.raises(ConfigError, match="--splits must be one of train, test, got 'val'"):
        Command(inner=Inner(), source=Path("s"), out=Path("o"), splits=("train", "val"))
    with pytest.raises(ConfigError, match="--force must be true or false, got 'no'"):
        Command(inner=Inner(), source=Path("s"), out=Path("o"), force="no")  # type: ignore[arg-type]


@dataclass(frozen=True)
class Renamed:
    """Options whose flags were renamed: the old flags still parse, with a warning."""

    overwrite: bool = option(False, "replace", deprecated=("--force",))
    size: float = option(1.0, "a size", check=require_positive, deprecated=("--scale",))


def test_a_deprecated_flag_is_taken_as_the_current_one_with_a_warning(
    capsys, reported_errors
) -> None:
    """Issue #48: one name for "replace" (--overwrite), the other kept for the job scripts
    that type it: parsed and checked as the current flag, one warning line naming it."""
    parser = Parser(prog="demo")
    add_options(parser, Renamed)
    assert from_args(Renamed, parser.parse_args(["--force", "--scale", "2"])) == Renamed(True, 2.0)
    assert from_args(Renamed, parser.parse_args(["--force", "--no-force"])) == Renamed(False)
    assert capsys.readouterr().err.splitlines() == [
        "demo: warning: --force is deprecated; use --overwrite",
        "demo: warning: --scale is deprecated; use --size",
        "demo: warning: --force is deprecated; use --overwrite",
        "demo: warning: --no-force is deprecated; use --no-overwrite",
    ]
    text = parser.format_help()
    assert "replace (default: off) (--force: the same, deprecated)" in text
    assert text.count("--force") == 1 and "--no-force" not in text  # the note only
    assert run(parser, lambda args: None, ["--scale", "0"]) == 2
    assert "argument --scale: must be positive, got 0.0" in reported_errors()[-1]


@group("shared options")
@dataclass(frozen=True, kw_only=True)
class Shared:
    """A group two commands take, one of them as it is, the other with its own default."""

    run_dir: Path | None = option(None, "a run", metavar="RUN")
    rate: float = option(0.5, "a rate", check=require_positive)
    mode: str = option("off", "a mode", choices=("off", "fast", "slow"), const="fast",
                       legacy={True: "fast", False: "off"})  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Layered(Shared):
    run_dir: Path = reuse(Shared, "run_dir", default=dataclasses.MISSING)
    name: str = option("ben", "a name", env="DEMO_NAME")
    steps: tuple[float, ...] | None = option(None, "steps")
    extra: tuple[str, ...] = option((), "repeatable", repeat=True)

    def __post_init__(self) -> None:
        check_fields(self)


def _layered(argv: list[str], *files: Path) -> Layered:
    parser = Parser(prog="demo")
    add_options(parser, Layered, layered=True)
    return resolve(Layered, parser.parse_args(argv), files)


def test_a_group_is_declared_once_and_adjusted_where_used(monkeypatch) -> None:
    parser = Parser(prog="demo")
    add_options(parser, Layered)
    text = parser.format_help()
    assert "shared options:\n  --run-dir RUN" in text and "(default: $DEMO_NAME, else ben)" in text
    assert "the following arguments are required: --run-dir" in _refused(parser, [])
    monkeypatch.setenv("DEMO_NAME", "env")
    args = parser.parse_args(["--run-dir", "r", "--mode", "--extra=-a", "--extra", "b"])
    made = from_args(Layered, args)
    assert (made.run_dir, made.name, made.mode, made.extra) == (Path("r"), "env", "fast",
                                                                ("-a", "b"))  # fmt: skip
    assert from_args(Layered, parser.parse_args(["--run-dir", "r", "--name", "x"])).name == "x"
    monkeypatch.setenv("DEMO_NAME", "")  # empty: unset
    assert from_args(Layered, parser.parse_args(["--run-dir", "r"])).name == "ben"


def _refused(parser: Parser, argv: list[str]) -> str:
    with pytest.raises(UsageError) as err:
        parser.parse_args(argv)
    return str(err.value)


def test_files_layer_between_defaults_and_flags_and_write_back(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("run_dir: r\nrate: 2\nmode: true\nsteps: [1, 2.5]\n")
    second.write_text("rate: 3.0\n")
    made = _layered(["--name", "n"], first, second)
    assert (made.run_dir, made.rate, made.mode, made.steps) == (Path("r"), 3.0, "fast",
                                                                (1.0, 2.5))  # fmt: skip
    assert _layered(["--rate", "4"], first, second).rate == 4.0
    again = tmp_path / "c.yaml"
    again.write_text(yaml.safe_dump(to_mapping(made)))
    assert _layered([], again) == made
    with pytest.raises(ConfigError, match="--run-dir is required"):
        _layered([])


@pytest.mark.parametrize(
    "text, message",
    [("rate: '2'", "a.yaml: rate must be a number, got '2'"),
     ("rate: -1", "a.yaml: rate must be positive, got -1.0"),
     ("mode: 1", "a.yaml: mode must be text, got 1"),
     ("steps: [x]", "a.yaml: steps must be a list of numbers, got ['x']"),
     ("nmae: x", "a.yaml: unknown option(s) nmae")],
)  # fmt: skip
def test_a_bad_file_value_names_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(f"run_dir: r\n{text}\n")
    with pytest.raises(ConfigError) as err:
        _layered([], path)
    assert str(err.value) == str(tmp_path / message)


def test_a_bad_environment_value_names_the_variable(monkeypatch) -> None:
    @dataclass(frozen=True)
    class Counted:
        slots: int = option(1, "slots", check=require_positive_int, env="DEMO_SLOTS")

    monkeypatch.setenv("DEMO_SLOTS", "0")
    with pytest.raises(ConfigError, match=r"\$DEMO_SLOTS='0' \(the default of --slots\): must"):
        from_args(Counted, argparse.Namespace())
