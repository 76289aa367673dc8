"""A declared option's name and values (:mod:`bigearthnet.core.declare` declares them): its
flag, and by its field's type hint which type one value is parsed as and whether it takes
several, whether a value is of the type (a YAML file's or a library caller's), what the type
is in words; a YAML mapping's values as a declaration's fields take them
(:func:`from_mapping`), and an object's options as such a mapping (:func:`to_mapping`)."""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bigearthnet.core.errors import ConfigError, InputError

__all__ = ["KEY", "as_kind", "conforms", "declared", "flag_name", "from_mapping", "hints",
           "kind_of", "plain", "settled", "shown", "to_mapping", "wanted"]  # fmt: skip

KEY = "option"  # the metadata key of a declared option
_HINTS: dict[type, dict[str, Any]] = {}

_WORDS = {
    bool: ("true or false", "true or false"),
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    str: ("text", "texts"),
    Path: ("a path", "paths"),
}


def hints(cls: type) -> dict[str, Any]:
    """The type hints of a declaration's fields (read once per class)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def kind_of(hint: Any) -> tuple[Any, bool]:
    """(the type one value is parsed as, whether the option takes several)."""
    hint = _without_none(hint)
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0], True
    return hint, False


def conforms(hint: Any, value: Any) -> bool:
    """Whether ``value`` is of the type ``hint`` (ints are numbers, text is a path, a list
    is a tuple; None only where the hint allows it)."""
    if value is None:
        return _without_none(hint) is not hint
    kind, many = kind_of(hint)
    if many:
        return isinstance(value, (tuple, list)) and all(_is(kind, v) for v in value)
    return _is(kind, value)


def wanted(hint: Any) -> str:
    """What a value of the type is, in words: "an integer", "a list of numbers"."""
    kind, many = kind_of(hint)
    one, several = _WORDS.get(kind, ("a value", "values"))
    return f"a list of {several}" if many else one


def settled(hint: Any, value: Any, legacy: Mapping[Any, Any] | None) -> Any:
    """``value`` in the declared form: a value of an older form (``legacy``) translated, a
    list as a tuple."""
    for old, new in (legacy or {}).items():
        if type(old) is type(value) and old == value:  # True is not 1
            return new
    if isinstance(value, list) and kind_of(hint)[1]:
        return tuple(value)
    return value


def as_kind(hint: Any, value: Any) -> Any:
    """A conforming plain value (a file's) as the type: text as a path, ints as floats."""
    kind = kind_of(hint)[0]
    if isinstance(value, tuple):
        return tuple(_one(kind, v) for v in value)
    return value if value is None else _one(kind, value)


def plain(value: Any) -> Any:
    """``value`` as plain data a YAML file holds: paths as text, tuples as lists."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


def shown(value: Any, joined: bool = False) -> str:
    """A default as --help shows it (``joined``: a tuple as one text, ``savedmodel,onnx``)."""
    if isinstance(value, tuple):
        return ("," if joined else " ").join(map(str, value))
    return str(value) if not isinstance(value, Path) else value.as_posix()


def from_mapping(cls: type, raw: Mapping[str, Any], source: str | Path) -> dict[str, Any]:
    """The values of ``raw`` (a YAML mapping of option: value) as ``cls``'s fields take
    them: ConfigError naming ``source`` and the key for an unknown key (a typo must not pass
    silently) or a value of another type (``eval_test: "false"`` is no false)."""
    known = declared(cls)
    unknown = sorted(map(str, set(raw) - set(known)))
    if unknown:
        raise ConfigError(f"{source}: unknown option(s) {', '.join(unknown)}")
    taken = {}
    for key, value in raw.items():
        field, hint = known[key]
        try:
            taken[key] = _from_file(field, hint, value)
        except ConfigError as err:
            raise ConfigError(f"{source}: {key} {str(err).split(' ', 1)[1]}", key=key) from None
    return taken


def to_mapping(obj: Any) -> dict[str, Any]:
    """``obj``'s options as plain data, one key per option (nested groups flattened, as
    their flags are), in declaration order: what :func:`from_mapping` reads back."""
    mapping: dict[str, Any] = {}
    for field in dataclasses.fields(obj):
        if "nested" in field.metadata:
            mapping.update(to_mapping(getattr(obj, field.name)))
        elif KEY in field.metadata:
            mapping[field.name] = plain(getattr(obj, field.name))
    return mapping


def declared(cls: type) -> dict[str, tuple[dataclasses.Field, Any]]:
    """Every declared option of ``cls``, nested groups' too: name -> (field, type)."""
    found = {}
    for field in dataclasses.fields(cls):
        if "nested" in field.metadata:
            found.update(declared(field.metadata["nested"]))
        elif KEY in field.metadata:
            found[field.name] = (field, hints(cls)[field.name])
    return found


def flag_name(field: dataclasses.Field) -> str:
    """The option's flag as users type it (``--cell``), or its positional name."""
    spec = field.metadata[KEY]
    if spec["positional"]:
        return spec["metavar"] or field.name.upper()
    return spec["flag"] or "--" + field.name.replace("_", "-")


def _from_file(field: dataclasses.Field, hint: Any, value: Any) -> Any:
    """A value from a file as the field takes it; ConfigError("--flag must be ...")."""
    spec = field.metadata[KEY]
    form = settled(hint, value, spec["legacy"])
    if conforms(hint, form):
        return as_kind(hint, form)
    if isinstance(value, str) and spec["parse"] is not None:  # as typed: savedmodel,onnx
        try:
            return spec["parse"](value)
        except (InputError, ValueError) as err:
            raise ConfigError(f"{flag_name(field)} {value!r}: {err}") from None
    raise ConfigError(f"{flag_name(field)} must be {wanted(hint)}, got {value!r}")


def _without_none(hint: Any) -> Any:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _is(kind: Any, value: Any) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    if kind is Path:
        return isinstance(value, (str, os.PathLike))
    return True  # another type: its parse and check decide


def _one(kind: Any, value: Any) -> Any:
    if kind is Path and isinstance(value, str):
        return Path(value)
    return float(value) if kind is float else value
