"""Options declared once: a command's options are the fields of a frozen dataclass.

Each field carries its default, help, choices and check (:func:`option`). :func:`add_options`
generates the command's argparse options from the fields, :func:`from_args` builds the same
dataclass from what was parsed, and that object is handed to the library unchanged. A check
is one of :mod:`bigearthnet.core.errors`' ``require_*`` functions, ``check(flag, value) ->
value``: the same code refuses a flag as it is parsed (one line, exit 2), a value from a
YAML file or an environment variable, and a value a library caller passes
(:func:`check_fields`, from the dataclass's ``__post_init__``). So a default is written
once, a check once, and adding a flag is adding a field.

Field types give the parsing, and the type a YAML value must have: ``int``, ``float``,
``str``, ``Path`` (also ``X | None``); ``bool`` is a ``--name/--no-name`` pair;
``tuple[X, ...]`` takes one or more values (in YAML a list). The flag is
``--name-with-dashes`` unless the field says otherwise.

Groups: options several commands share are a declared dataclass of their own. A command's
declaration inherits the group (its fields, and attributes such as ``opts.run_dir``, become
the command's), or holds it whole with :func:`nested` (a value handed on as one: the model
to predict with). :func:`reuse` adjusts one option of a group for one use (another default,
positional) and :func:`group` gives a group its heading in ``--help``.

Where a value comes from, last wins: the field's default, its environment variable
(``env=``), each YAML file :func:`resolve` is given (``train.py --config``), the flags typed.
argparse keeps only the flags typed (every default is ``SUPPRESS``), so the layers below
them stay visible; :func:`to_mapping` writes an object back as such a file.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from bigearthnet.core import option_values
from bigearthnet.core.errors import ConfigError, InputError
from bigearthnet.core.option_values import KEY, declared, flag_name, from_mapping, to_mapping

__all__ = ["KEY", "add_options", "check_fields", "flag_name", "from_args", "from_mapping",
           "group", "nested", "option", "resolve", "reuse", "to_mapping"]  # fmt: skip

T = TypeVar("T")
Check = Callable[[str, Any], Any]
_TITLE = "__option_group__"  # a group's heading in --help (group())
_SPEC = ("help", "check", "choices", "metavar", "flag", "short", "positional", "parse",
         "required_by", "const", "env", "repeat", "legacy", "deprecated")  # fmt: skip


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
    const: Any = None,
    env: str | None = None,
    repeat: bool = False,
    legacy: Mapping[Any, Any] | None = None,
    deprecated: tuple[str, ...] = (),
    **metadata: Any,
) -> Any:
    """A dataclass field that is a command-line option. ``default`` MISSING: required.
    ``parse`` turns the text into the value where the field's type does not say how.
    ``required_by``: a value without default that only that use of the command needs (the
    flag is optional to argparse; the dataclass refuses None naming both). ``const``: the
    value of the flag given alone. ``env``: the environment variable that, when set,
    replaces the default (a job script's setting). ``repeat``: a tuple given one flag per
    value (``--x A --x B``). ``legacy``: values of an older form, each accepted as the
    current one it maps to (a run folder written before). ``deprecated``: older flags of
    the option, still accepted (a job script written before a rename) with one warning
    line naming the current flag. ``metadata``: more facts about the option, for its other
    readers (a run's recipe)."""
    spec = {"help": help, "check": check, "choices": choices, "metavar": metavar,
            "flag": flag, "short": short, "positional": positional, "parse": parse,
            "required_by": required_by, "const": const, "env": env, "repeat": repeat,
            "legacy": legacy, "deprecated": deprecated}  # fmt: skip
    if repeat and deprecated:
        raise TypeError("option(): a repeated option has no deprecated flags")
    if required_by is not None:
        default = None
    return dataclasses.field(default=default, metadata={**metadata, KEY: spec})


def reuse(cls: type, name: str, **changes: Any) -> Any:
    """The option ``name`` of the declaration ``cls`` (a group a command inherits), as this
    use needs it: ``changes`` are :func:`option`'s arguments that differ here (``default``,
    ``positional``...); help, check and choices stay the group's."""
    base = {f.name: f for f in dataclasses.fields(cls)}[name]
    default = changes.pop("default", base.default)
    unknown = set(changes) - set(_SPEC)
    if unknown:
        raise TypeError(f"reuse({cls.__name__}, {name!r}): no option argument {unknown}")
    spec = {**base.metadata[KEY], **changes}
    return dataclasses.field(default=default, metadata={**base.metadata, KEY: spec})


def nested(cls: type) -> Any:
    """A field holding another declared dataclass (a group of options several commands
    share, e.g. the model to predict with): its options join the command's."""
    return dataclasses.field(metadata={KEY: None, "nested": cls})


def group(title: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: the options this dataclass declares are listed under ``title`` in
    ``--help`` (wherever it is inherited)."""

    def titled(cls: type[T]) -> type[T]:
        setattr(cls, _TITLE, title)
        return cls

    return titled


def add_options(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    exclude: tuple[str, ...] = (),
    layered: bool = False,
) -> None:
    """One argparse option per declared field of ``cls`` (not those in ``exclude``), under
    its group's heading. ``layered``: a value may also come from a file (:func:`resolve`),
    so argparse requires nothing."""
    hints = option_values.hints(cls)
    sections: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name in exclude:
            continue
        if "nested" in field.metadata:
            add_options(parser, field.metadata["nested"], exclude=exclude, layered=layered)
        elif KEY in field.metadata:
            title = _title(cls, field.name)
            if title is not None and title not in sections:
                sections[title] = parser.add_argument_group(title)
            target = parser if title is None else sections[title]
            _add(target, field, hints[field.name], layered)


def from_args(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """``cls`` from the parsed ``args`` (its declared fields; those not typed from their
    environment variable or default) and ``given`` (the others)."""
    return _build(cls, vars(args), given)


def resolve(cls: type[T], args: argparse.Namespace, files: Iterable[Path]) -> T:
    """``cls`` from defaults <- environment <- each YAML file of ``files``, left to right (a
    later file's key wins) <- the flags typed (``args``, parsed with ``layered``). An error
    about a value read from a file names the file that set it."""
    from bigearthnet.core.yaml_files import read_mapping  # PyYAML: only where files are read

    supplied: dict[str, Any] = {}
    sources: dict[str, Path] = {}  # key -> the file whose value it kept
    for path in map(Path, files):
        raw = from_mapping(cls, read_mapping(path, what="option: value"), path)
        supplied.update(raw)
        sources.update(dict.fromkeys(raw, path))
    typed = {name: value for name, value in vars(args).items() if name in declared(cls)}
    supplied.update(typed)
    for name in typed:
        sources.pop(name, None)
    try:
        return _build(cls, supplied, {})
    except ConfigError as err:
        key = err.key or _key_of(cls, str(err))
        if key not in sources:
            raise
        text = str(err)
        if text.startswith("--"):  # "--dropout must ..." -> "dropout must ..."
            text = f"{key} {text.split(' ', 1)[1]}"
        raise ConfigError(f"{sources[key]}: {text}", key=key) from None


def check_fields(obj: Any) -> None:
    """ConfigError naming the flag of the first declared field whose value is not of its
    type or its check or choices refuse; for the library's own callers (values from a parser
    or a file were checked already). Values of an older form (``legacy``) and lists given
    for tuples are first put in the declared form."""
    hints = option_values.hints(type(obj))
    for field in dataclasses.fields(obj):
        spec = field.metadata.get(KEY)
        if spec is None:  # not an option, or a nested group (checked when it was made)
            continue
        given = getattr(obj, field.name)
        value = option_values.settled(hints[field.name], given, spec["legacy"])
        if value is not given:
            object.__setattr__(obj, field.name, value)  # frozen too: it is being made
        try:
            _check(field, hints[field.name], value)
        except ConfigError as err:
            raise ConfigError(str(err), key=field.name) from None


def _check(field: dataclasses.Field, hint: Any, value: Any) -> None:
    spec, name = field.metadata[KEY], flag_name(field)
    if value is None and spec["required_by"] is not None:
        raise ConfigError(f"{spec['required_by']} needs {name}")
    if not option_values.conforms(hint, value):
        raise ConfigError(f"{name} must be {option_values.wanted(hint)}, got {value!r}")
    if value is None:
        return
    if spec["check"] is not None:
        spec["check"](name, value)
    wrong = [v for v in (value if isinstance(value, tuple) else (value,))
             if spec["choices"] is not None and v not in spec["choices"]]  # fmt: skip
    if wrong:
        choices = ", ".join(map(str, spec["choices"]))
        raise ConfigError(f"{name} must be one of {choices}, got {wrong[0]!r}")


# ----------------------------------------------------------------------------- parsing


def _add(target: Any, field: dataclasses.Field, hint: Any, layered: bool) -> None:
    spec = field.metadata[KEY]
    kind, many = option_values.kind_of(hint)
    required = field.default is dataclasses.MISSING and not layered and spec["env"] is None
    # Only what is typed lands in the namespace; the rest comes from env, files, defaults.
    kwargs: dict[str, Any] = {"help": spec["help"] + _default_note(field, kind),
                              "default": argparse.SUPPRESS}  # fmt: skip
    if kind is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        many = many and spec["parse"] is None  # a parse takes the whole text
        kwargs.update(type=_parser(field, spec["parse"] or kind), metavar=spec["metavar"],
                      choices=spec["choices"])  # fmt: skip
        if spec["repeat"]:
            kwargs["action"] = "append"
        elif spec["const"] is not None:
            kwargs.update(nargs="?", const=spec["const"])
        elif many:
            kwargs["nargs"] = "+"
    if spec["positional"]:
        if not required:  # argparse would parse a SUPPRESS default as text: the real one
            kwargs.update(nargs="*" if many else "?", default=field.default)
        target.add_argument(field.name, **kwargs)
        return
    flags = [flag_name(field), *([spec["short"]] if spec["short"] else [])]
    if spec["deprecated"]:
        kwargs["help"] += f" ({', '.join(spec['deprecated'])}: the same, deprecated)"
    target.add_argument(*flags, dest=field.name, required=required, **kwargs)
    for old in spec["deprecated"]:  # hidden from --help: the note above names them
        olds = [old, f"--no-{old[2:]}"] if kind is bool else [old]
        given = {k: v for k, v in kwargs.items() if k not in ("action", "help")}
        target.add_argument(*olds, dest=field.name, action=_Renamed, current=flags[0],
                            switch=kind is bool, help=argparse.SUPPRESS, **given)  # fmt: skip


class _Renamed(argparse.Action):
    """An older flag of an option: parsed as the current one (``switch``: a bool's flag or
    its ``--no-`` form), with one warning line naming the flag to type instead."""

    def __init__(
        self, option_strings: list[str], dest: str, *, current: str, switch: bool, **kwargs: Any
    ) -> None:
        if switch:
            kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)
        self.current, self.switch = current, switch

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        negated = self.switch and str(option_string).startswith("--no-")
        now = f"--no-{self.current[2:]}" if negated else self.current
        print(f"{parser.prog}: warning: {option_string} is deprecated; use {now}",
              file=sys.stderr)  # fmt: skip
        setattr(namespace, self.dest, (not negated) if self.switch else values)


def _default_note(field: dataclasses.Field, kind: Any) -> str:
    """`` (default: ...)`` for the help: the value, or the environment variable first."""
    spec, default = field.metadata[KEY], field.default
    if kind is bool:
        shown: str | None = "on" if default else "off"
    elif default is dataclasses.MISSING or default in (None, "", ()):
        shown = None
    else:
        shown = option_values.shown(
            default, joined=spec["parse"] is not None
        )  # as typed: savedmodel,onnx
    if spec["env"]:
        return f" (default: ${spec['env']}{f', else {shown}' if shown else ''})"
    return f" (default: {shown})" if shown else ""


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


# ----------------------------------------------------------------------------- building


def _build(cls: type[T], supplied: Mapping[str, Any], given: Mapping[str, Any]) -> T:
    """``cls`` from ``supplied`` (option name -> value, for every nested group too), the
    environment, the defaults, and ``given`` (fields that are no option)."""
    hints = option_values.hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name in given:
            continue
        if "nested" in field.metadata:
            values[field.name] = _build(field.metadata["nested"], supplied, {})
        elif KEY in field.metadata:
            if field.name in supplied:
                value = supplied[field.name]  # argparse gives a list for several values
                values[field.name] = tuple(value) if isinstance(value, list) else value
            elif _env_text(field):
                values[field.name] = _from_env(field, hints[field.name])
            elif field.default is dataclasses.MISSING:
                env = field.metadata[KEY]["env"]
                also = f" (or set ${env})" if env else ""
                raise ConfigError(f"{flag_name(field)} is required{also}", key=field.name)
    return cls(**values, **given)


def _env_text(field: dataclasses.Field) -> str:
    env = field.metadata[KEY]["env"]
    return os.environ.get(env, "") if env else ""


def _from_env(field: dataclasses.Field, hint: Any) -> Any:
    """The value the field's environment variable says, parsed and checked as its flag."""
    spec, text = field.metadata[KEY], _env_text(field)
    kind, many = option_values.kind_of(hint)
    parse = _parser(field, spec["parse"] or kind)
    try:
        return tuple(map(parse, text.split())) if many else parse(text)
    except argparse.ArgumentTypeError as err:
        raise ConfigError(f"${spec['env']}={text!r} (the default of {flag_name(field)}): "
                          f"{err}", key=field.name) from None  # fmt: skip


# ----------------------------------------------------------------------------- lookups


def _title(cls: type, name: str) -> str | None:
    """The heading of the group that declares option ``name`` of ``cls`` (None: none)."""
    for owner in cls.__mro__:
        if name in vars(owner).get("__annotations__", {}) and _TITLE in vars(owner):
            return vars(owner)[_TITLE]
    return None


def _key_of(cls: type, message: str) -> str | None:
    """The option a check's message starts with ("--dropout must ..." -> dropout)."""
    flag = message.split(" ", 1)[0]
    return next((name for name, (f, _) in declared(cls).items() if flag_name(f) == flag), None)
