"""One convention for every command: how it parses, prints an error, and maps it to an exit code.

A command module builds a :class:`Parser` and hands it, with a handler, to :func:`run`::

    def main(argv: list[str] | None = None) -> int:
        return run(build_parser(), _handle, argv)

:func:`run` parses (a bad flag is one line and exit 2; ``--help`` exits 0), calls the handler,
and turns what it raises into one line on stderr and an exit code:

==================================================  ====  ================================
raised                                              code  meaning
==================================================  ====  ================================
nothing (the handler's int, or 0 for None)          0     done
:class:`~bigearthnet.core.errors.RunFailed`              1     ran and failed; outputs kept
an OSError of the system (disk full, I/O error)     1     ran and failed: one line
InputError (ConfigError, ShardError, ...)           2     bad input or options: nothing
                                                          was done
:class:`~bigearthnet.core.errors.RequeueRequested`       3     checkpointed; requeue the job
anything else (a ValueError, KeyError, ...)         1     a bug: the traceback, then one line
==================================================  ====  ================================

Bad input is recognised where it is read and raised there as an InputError naming the file
or option; a ValueError that reaches this point was not foreseen by anyone, so it is a bug
and keeps its traceback: turning it into "bad input, exit 2" would send the user hunting
for a mistake they did not make.

Under a Horovod launcher the line carries the rank prefix (the ranks' logger prints it), so
a job log says which rank saw the problem. Kept free of TensorFlow: ``--help`` and option
errors answer at once.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from traceback import print_exc
from typing import NamedTuple, NoReturn, TypeVar

from bigearthnet.core import runlock
from bigearthnet.core.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_REQUEUE,
    ConfigError,
    InputError,
    RequeueRequested,
    RunFailed,
    UsageError,
)
from bigearthnet.core.util import first_line

T = TypeVar("T")
Handler = Callable[[argparse.Namespace], "int | None"]


class Parser(argparse.ArgumentParser):
    """argparse whose errors are raised (and then printed as one line by :func:`run`), not
    printed with the usage block and exited on. A long option is taken only as spelled: an
    abbreviation (``--epoch 3`` for ``--epochs 3``) is an unknown option, whose error names
    the nearest ones, as it names the nearest choice of a mistyped value. Its ``--help``
    lists the sub-commands :func:`dispatch` gave it and is plain text (:func:`plain_text`)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)  # also for the sub-parsers made from it
        super().__init__(*args, **kwargs)
        self.commands: Mapping[str, Command] = {}  # listed in --help, after the description
        self.default_command: str | None = None
        self.hint = ""  # said instead of any parse error (dispatch: a mistyped command)

    def format_help(self) -> str:
        text = super().format_help()
        if self.commands:  # blocks: usage, the description (if any), then the rest
            blocks = text.split("\n\n", 2 if self.description else 1)
            blocks.insert(-1, command_list(self.commands, self.default_command))
            text = "\n\n".join(blocks)
        return plain_text(text)

    def error(self, message: str) -> NoReturn:
        if self.hint:
            raise UsageError(f"{self.hint} (see --help)")
        raise UsageError(f"{message}{self._near_miss(message)} (see --help)")

    def _near_miss(self, message: str) -> str:
        """``; did you mean ...?`` for a mistyped choice or long option in ``message``."""
        choice = _INVALID_CHOICE.search(message)
        if choice is not None:
            choices = [c.strip().strip("'") for c in choice["choices"].split(",")]
            return did_you_mean(choice["given"], choices)
        if message.startswith(_UNRECOGNIZED):
            flags = [flag for flag in self._option_string_actions if flag.startswith("--")]
            for word in message[len(_UNRECOGNIZED) :].split():
                hint = did_you_mean(word.partition("=")[0], flags) if word[:2] == "--" else ""
                if hint:
                    return hint
        return ""


# argparse's messages (3.9-3.12 quote the choices with repr, newer versions do not).
_INVALID_CHOICE = re.compile(r"invalid choice: '?(?P<given>.*?)'? \(choose from (?P<choices>.*)\)")
_UNRECOGNIZED = "unrecognized arguments: "


def did_you_mean(given: str, known: Sequence[str]) -> str:
    """``; did you mean 'x'?`` naming the known words ``given`` abbreviates or nearly
    spells (at most three), or "" when none is near."""
    if not given.strip():  # "" abbreviates every word and nearly spells none
        return ""
    near = [word for word in known if word.startswith(given) and word != given]
    near = near or difflib.get_close_matches(given, known, n=3, cutoff=0.75)
    if not near:
        return ""
    return f"; did you mean {' or '.join(repr(word) for word in near[:3])}?"


class Command(NamedTuple):
    """A sub-command of :func:`dispatch`: its one line in the command's ``--help``, its
    parser's builder, its handler (the description of its own ``--help`` is the parser's)."""

    help: str
    build: Callable[[], Parser]
    handler: Handler


def command_list(commands: Mapping[str, Command], default: str | None) -> str:
    """The sub-commands, one line each, for a command's ``--help``."""
    when = f"none given: {default}; " if default else ""
    width = max(map(len, commands))
    lines = [f"commands ({when}COMMAND --help for its options):"]
    lines += [f"  {name:<{width}}  {command.help}" for name, command in commands.items()]
    return "\n".join(lines)


# Sphinx roles (:mod:`a.b`, :class:`~a.b.C`) and literals (``x``) of the docstrings help
# texts are taken from: a reader of --help sees a.b, C and x.
_ROLE = re.compile(r":[a-z]+:`(~?)([^`]*)`")


def plain_text(text: str) -> str:
    """``text`` without reStructuredText markup: the one place help is cleaned of it."""
    text = _ROLE.sub(lambda m: m[2].rsplit(".", 1)[-1] if m[1] else m[2], text)
    return text.replace("``", "")


def run(parser: argparse.ArgumentParser, handler: Handler, argv: list[str] | None) -> int:
    """Parse ``argv``, call ``handler(args)``, return the exit code of what happened."""
    prog = parser.prog
    try:
        args = parser.parse_args(argv)
        return int(handler(args) or 0)
    except SystemExit as exc:  # --help and --version: argparse's own, normal exit
        return exc.code if isinstance(exc.code, int) else 0
    except RequeueRequested as err:
        report(prog, f"{first_line(err)} (exit {EXIT_REQUEUE}: requeue me)", warning=True)
        return EXIT_REQUEUE
    except RunFailed as err:
        report(prog, f"failed: {first_line(err)}")
        return EXIT_FAILED
    except InputError as err:
        report(prog, f"error: {first_line(err)}")
        return EXIT_BAD_INPUT
    except OSError as err:  # the system's: a full disk, an I/O error (inputs are checked)
        report(prog, f"failed: {first_line(err)}")
        return EXIT_FAILED
    except Exception:  # a bug: its traceback is what a report needs
        report(prog, "internal error (a bug, not your input); its traceback:", traceback=True)
        return EXIT_FAILED
    finally:
        runlock.release_all()  # the run folders this command wrote to


def report(prog: str, message: str, *, warning: bool = False, traceback: bool = False) -> None:
    """One line ``prog: message`` on stderr (``traceback``: then the traceback of the error
    being handled); through the ranks' logger (``[rank r/n]`` prefix) once a distributed
    command has set it up."""
    logger = logging.getLogger("bigearthnet")
    if logger.handlers:
        level = logging.WARNING if warning else logging.ERROR
        logger.log(level, "%s: %s", prog, message, exc_info=traceback)
    else:
        print(f"{prog}: {message}", file=sys.stderr)
        if traceback:
            print_exc()


def declared_parser(
    prog: str, description: str, *declared: type, exclude: tuple[str, ...] = ()
) -> Parser:
    """A command's parser generated from its declared options (:mod:`bigearthnet.core.
    declare`), the classes' fields in order."""
    from bigearthnet.core.declare import add_options

    parser = Parser(prog=prog, description=description)
    for cls in declared:
        add_options(parser, cls, exclude=exclude)
    return parser


def study_parser(prog: str, description: str, declared: type) -> Parser:
    """A study command's parser: its declared options, then after ``--`` train.py flags for
    every run it launches (:func:`study_train_args`)."""
    parser = declared_parser(prog, description, declared)
    parser.add_argument(
        "train_args", nargs=argparse.REMAINDER,
        help="after --: more train.py flags for every run (e.g. -- --model tiny)",
    )  # fmt: skip
    return parser


def study_train_args(args: argparse.Namespace, owned: tuple[str, ...]) -> tuple[str, ...]:
    """The train.py flags after ``--``; ConfigError for one the study sets itself."""
    extra = tuple(a for a in args.train_args if a != "--")
    taken = [flag for flag in owned if flag in extra]
    if taken:
        raise ConfigError(f"train.py flags after -- may not set {', '.join(taken)}: the study "
                          "sets them for each run")  # fmt: skip
    return extra


def study_settings(declared: type[T], args: argparse.Namespace, owned: tuple[str, ...]) -> T:
    """A study's settings from its parsed ``args`` (train.py flags after ``--`` included);
    InputError unless ``--data`` holds shards; ``--out`` made."""
    from bigearthnet.core.declare import from_args

    settings = from_args(declared, args, train_args=study_train_args(args, owned))
    data, out = Path(settings.data), Path(settings.out)  # type: ignore[attr-defined]
    if not (data / "manifest.json").is_file():
        raise InputError(f"{data}: no manifest.json (not a preprocessed shard folder)")
    out.mkdir(parents=True, exist_ok=True)
    return settings


def dispatch(
    argv: list[str] | None,
    commands: Mapping[str, Command],
    *,
    prog: str,
    default: str | None = None,
    description: str | None = None,
) -> int:
    """Run the sub-command named by ``argv[0]``; without one, ``default``'s, whose ``--help``
    lists them all, or (no default) a parser of the command alone, of ``description``, that
    lists them. A first word that nearly spells a command (``scenes``) and fails the
    default's parse is refused as that: "did you mean 'scene'?"."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] and args[0] in commands:
        command = commands[args[0]]
        return run(command.build(), command.handler, args[1:])
    if default is None:
        top = Parser(prog=prog, description=description)
        top.add_argument("command", metavar="COMMAND", choices=tuple(commands),
                         help="one of the commands below")  # fmt: skip
        top.commands = commands
        return run(top, lambda parsed: None, args[:1])
    parser = commands[default].build()
    parser.commands, parser.default_command = commands, default
    first = args[0] if args else "-"
    near = "" if not first or first.startswith("-") else did_you_mean(first, list(commands))
    if near:
        parser.hint = f"{first!r} is not a command of {prog}{near}"
    return run(parser, commands[default].handler, args)


def checked(check: Callable[[str, T], T], kind: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse ``type=`` from one of :mod:`bigearthnet.core.errors`' checks, so a flag and the
    YAML key of the same option are validated by the same code."""

    def parse(text: str) -> T:
        try:
            return check("value", kind(text))
        except (ConfigError, ValueError) as err:
            raise argparse.ArgumentTypeError(str(err).replace("value ", "", 1)) from None

    return parse
