"""YAML files as this project reads them: a mapping of plain data, every key once.

``yaml.SafeLoader`` builds plain data only: a Python tag (``!!python/object``) is refused,
so a file can never run code. YAML itself keeps the last of two equal keys without a word
(``lr: 0.05`` ... ``lr: 5.0`` trains at 5.0); the loader here refuses such a mapping, at any
depth, naming the key and both lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bigearthnet.core.errors import ConfigError

__all__ = ["DuplicateKey", "read_mapping"]


class DuplicateKey(yaml.YAMLError):
    """A mapping that names one key twice."""

    def __init__(self, key: str, first: int, again: int) -> None:
        super().__init__(f"key {key} given twice (lines {first} and {again}): remove one")
        self.key = key


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping naming a key twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # SafeLoader refuses unhashable keys itself
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in lines:
                raise DuplicateKey(str(key), lines[key], line)
            lines[key] = line
        return super().construct_mapping(node, deep=deep)


def read_mapping(path: Path, *, what: str = "key: value") -> dict[str, Any]:
    """The mapping in ``path`` ({} for an empty file); ConfigError naming the file when it is
    missing, not YAML, not a mapping or names a key twice (``what``: the mapping's entries,
    in the message)."""
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except DuplicateKey as err:
        raise ConfigError(f"{path}: {err}", key=err.key) from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of {what}")
    return raw
