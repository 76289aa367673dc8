"""``make help`` is current: every target the Makefile declares has its one line there, the
line prints as written (help greps the Makefile: a ``$(VAR)`` would print unexpanded), and
every ``make TARGET`` the docs name is a target."""

from __future__ import annotations

import re

from helpers import REPO
from test_paths import PAGES

MAKEFILE = (REPO / "Makefile").read_text(encoding="utf-8")


def described() -> dict[str, str]:
    """Target -> its ``## `` line, as ``make help`` prints them."""
    return dict(re.findall(r"^([a-z-]+):.*?## (.*)$", MAKEFILE, flags=re.M))


def test_every_target_has_its_line_in_make_help() -> None:
    phony = set(re.search(r"^\.PHONY: (.*)$", MAKEFILE, flags=re.M)[1].split())
    targets = set(re.findall(r"^([a-z-]+):", MAKEFILE, flags=re.M))
    assert phony == targets == set(described()), (phony ^ targets) | (targets ^ set(described()))
    unexpanded = {target: line for target, line in described().items() if "$(" in line}
    assert not unexpanded, unexpanded


def test_the_docs_name_only_targets() -> None:
    named = {m for page in PAGES for m in re.findall(r"`make ([a-z-]+)", page.read_text())}
    assert named and named <= set(described()), named - set(described())
