"""Every command's ``--help`` shows the way: a description, its sub-commands one line each,
no reStructuredText markup of the docstrings it is taken from - for every console script of
setup.cfg and every sub-command its help lists. In-process (parsers only), and one probe
that all of it loads no TensorFlow."""

from __future__ import annotations

import configparser
import contextlib
import importlib
import io
import json
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
from helpers import REPO

MARKUP = re.compile(r"``|:[a-z]+:`")
SUBCOMMANDS = {
    "bigearthnet-map": ["patches", "scene", "change", "region"],
    "bigearthnet-synth": ["archive", "scene", "region", "score"],
    "bigearthnet-weights": ["import", "run"],
    "bigearthnet-elastic": ["grow", "shrink", "status", "follow"],
}


def console_scripts() -> dict[str, str]:
    """setup.cfg's console scripts: name -> the module whose ``main`` they run."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    return {name.strip(): target.split(":")[0].strip() for name, target in
            (line.split("=") for line in lines)}  # fmt: skip


def help_of(main: Callable[[list[str]], int], argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--help"]) == 0, argv
    return out.getvalue()


def listed_commands(text: str) -> list[str]:
    """The sub-commands of a help's ``commands`` section, each checked to take one line."""
    section = text.split("\ncommands", 1)[1].split("\n\n")[0].splitlines()[1:]
    assert not [line for line in section if line.startswith(" " * 8)], section  # wrapped
    return [m[1] for line in section if (m := re.match(r" {2,4}([a-z]+) {2,}\S", line))]


def has_description(text: str) -> bool:
    """Whether the block after the usage is prose, not a section (``options:``)."""
    block = text.split("\n\n")[1]
    return not block.startswith(" ") and not block.splitlines()[0].endswith(":")


@pytest.mark.parametrize("script", sorted(console_scripts()))
def test_every_help_has_a_description_its_commands_and_no_markup(script: str, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # the width a terminal gives at the least
    main = importlib.import_module(console_scripts()[script]).main
    top = help_of(main, [])
    expected = SUBCOMMANDS.get(script, [])
    assert ("\ncommands" in top and listed_commands(top) == expected) or not expected, top
    for argv in [[], *([name] for name in expected)]:
        text = top if not argv else help_of(main, argv)
        assert has_description(text), (script, argv, text)
        assert not MARKUP.search(text), (script, argv, MARKUP.findall(text))


PROBE = """
import contextlib, importlib, io, json, sys
for module, argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()):
        assert importlib.import_module(module).main([*argv, "--help"]) == 0, (module, argv)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "horovod", "keras"))
print("heavy", heavy)
"""


def test_no_help_loads_tensorflow() -> None:
    """Every help answers at once, on a login node too: one process asks them all."""
    runs = [(module, []) for module in console_scripts().values()]
    runs += [(console_scripts()[s], [name]) for s, names in SUBCOMMANDS.items() for name in names]
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(runs)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "heavy []", done.stdout[-500:]
