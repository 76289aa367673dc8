"""Options declared once: a command's options are the fields of a frozen dataclass.

Each field carries its default, help, choices and check (:func:`option`). :func:`add_options`
generates the command's argparse options from the fields, :func:`from_args` builds the same
dataclass from what was parsed, and that object is handed to the library unchanged. A check
is one of :mod:`bigearthnet.core.errors`' ``require_*`` functions, ``check(flag, value) ->
value``: the same code refuses a flag as it is parsed (one line, exit 2) and a value a
library caller passes (:func:`check_fields`, from the dataclass's ``__post_init__``). So a
default is written once, a check once, and adding a flag is adding a field.

Field types give the parsing: ``int``, ``float``, ``str``, ``Path`` (also ``X | None``);
``bool`` is a ``--name/--no-name`` pair; ``tuple[X, ...]`` takes one or more values. The
flag is ``--name-with-dashes`` unless the field says otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from bigearthnet.core.errors import ConfigError, InputError

__all__ = ["add_options", "check_fields", "flag_name", "from_args", "nested", "option"]

T = TypeVar("T")
Check = Callable[[str, Any], Any]
KEY = "option"  # the metadata key of a declared option


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    check: Check | None = None,
    choices: tuple | None = None,
    metavar: str | None = None,
    flag: str | None = None,
    short: str | None = None,
    positional: bool = False,
    parse: Callable[[str], Any] | None = None,
    required_by: str | None = None,
) -> Any:
    """A dataclass field that is a command-line option. ``default`` MISSING: required.
    ``parse`` turns the text into the value where the field's type does not say how.
    ``required_by``: a value without default that only that use of the command needs (the
    flag is optional to argparse; the dataclass refuses None naming both)."""
    spec = {"help": help, "check": check, "choices": choices, "metavar": metavar,
            "flag": flag, "short": short, "positional": positional, "parse": parse,
            "required_by": required_by}  # fmt: skip
    if required_by is not None:
        return dataclasses.field(default=None, metadata={KEY: spec})
    return dataclasses.field(default=default, metadata={KEY: spec})


def nested(cls: type) -> Any:
    """A field holding another declared dataclass (a group of options several commands
    share, e.g. the model to predict with): its options join the command's."""
    return dataclasses.field(metadata={KEY: None, "nested": cls})


def flag_name(field: dataclasses.Field) -> str:
    """The option's flag as users type it (``--cell``), or its positional name."""
    spec = field.metadata[KEY]
    if spec["positional"]:
        return spec["metavar"] or field.name.upper()
    return spec["flag"] or "--" + field.name.replace("_", "-")


def add_options(
    parser: argparse.ArgumentParser, cls: type, *, exclude: tuple[str, ...] = ()
) -> None:
    """One argparse option per declared field of ``cls`` (not those in ``exclude``)."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if field.name in exclude:
            continue
        if "nested" in field.metadata:
            add_options(parser, field.metadata["nested"], exclude=exclude)
        elif KEY in field.metadata:
            _add(parser, field, hints[field.name])


def from_args(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """``cls`` from the parsed ``args`` (its declared fields) and ``given`` (the others)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in given:
            continue
        if "nested" in f.metadata:
            values[f.name] = from_args(f.metadata["nested"], args)
        elif KEY in f.metadata and hasattr(args, f.name):
            value = getattr(args, f.name)  # argparse gives a list for several values
            values[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values, **given)


def check_fields(obj: Any) -> None:
    """ConfigError naming the flag of the first declared field whose value its check
    refuses; for the library's own callers (values from a parser were checked already)."""
    for field in dataclasses.fields(obj):
        spec = field.metadata.get(KEY)
        value = getattr(obj, field.name)
        if spec is not None and value is None and spec["required_by"] is not None:
            raise ConfigError(f"{spec['required_by']} needs {flag_name(field)}")
        if spec is None or value is None:  # not an option, a nested group (checked), unset
            continue
        if spec["check"] is not None:
            spec["check"](flag_name(field), value)
        given = value if isinstance(value, tuple) else (value,)
        wrong = [v for v in given if spec["choices"] is not None and v not in spec["choices"]]
        if wrong:
            choices = ", ".join(map(str, spec["choices"]))
            raise ConfigError(f"{flag_name(field)} {wrong[0]!r}: expected one of {choices}")


def _add(parser: argparse.ArgumentParser, field: dataclasses.Field, hint: Any) -> None:
    spec = field.metadata[KEY]
    kind, many = _kind(hint)
    required = field.default is dataclasses.MISSING
    kwargs: dict[str, Any] = {"help": spec["help"], "default": _default(field)}
    if kind is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
        kwargs["help"] += f" (default: {'on' if field.default else 'off'})"
    else:
        if not required and field.default not in (None, "", ()):
            joined = spec["parse"] is not None  # shown as typed: savedmodel,onnx
            kwargs["help"] += f" (default: {_shown(field.default, joined)})"
        many = many and spec["parse"] is None  # a parse takes the whole text
        kwargs.update(type=_parser(field, spec["parse"] or kind), metavar=spec["metavar"],
                      choices=spec["choices"], nargs="+" if many else None)  # fmt: skip
    if spec["positional"]:
        if not required:
            kwargs["nargs"] = "*" if many else "?"
        parser.add_argument(field.name, **kwargs)
        return
    flags = [flag_name(field), *([spec["short"]] if spec["short"] else [])]
    parser.add_argument(*flags, dest=field.name, required=required, **kwargs)


def _parser(field: dataclasses.Field, kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type=``: the text as ``kind``, then the field's check; an error is an
    ArgumentTypeError, which argparse prints after the flag's name."""
    check = field.metadata[KEY]["check"]
    name = flag_name(field)

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except InputError as err:  # a parse's own message (before ValueError: a subclass)
            raise argparse.ArgumentTypeError(str(err).removeprefix(f"{name} ")) from None
        except (ValueError, TypeError):
            what = getattr(kind, "__name__", "value")
            raise argparse.ArgumentTypeError(f"invalid {what} value: {text!r}") from None
        if check is None:
            return value
        try:
            return check(name, value)
        except InputError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(f"{name} ")) from None

    parse.__name__ = getattr(kind, "__name__", "value")
    return parse


def _kind(hint: Any) -> tuple[Any, bool]:
    """(the type one value is parsed as, whether the option takes several)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0], True
    return hint, False


def _default(field: dataclasses.Field) -> Any:
    return None if field.default is dataclasses.MISSING else field.default


def _shown(value: Any, joined: bool = False) -> str:
    if isinstance(value, tuple):
        return ("," if joined else " ").join(map(str, value))
    return str(value) if not isinstance(value, Path) else value.as_posix()
