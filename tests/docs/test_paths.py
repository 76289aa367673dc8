"""README.md and docs/ name only paths that exist: every relative link, and every
backticked path into the repository (``bigearthnet/...``, ``jobs/...``, ``tests/...``)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from helpers import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "jobs" / "README.md"]
PAGES.append(REPO / "benchmarks" / "README.md")
TOP = ("bigearthnet", "models", "tests", "jobs", "configs", "docs", "benchmarks", "scripts")
CODE_PATH = re.compile(rf"`((?:{'|'.join(TOP)})/[\w./*-]*|train\.py|evaluate\.py|\.ci/run)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
BARE_MODULE = re.compile(r"`(\w+\.py)`")  # a module named by its file name alone
GENERATED = {"benchmarks/results.json", "benchmarks/results-stacks.json"}  # make bench writes them


@functools.cache
def repo_files() -> frozenset[str]:
    """The names of the repository's Python files (a bare ``x.py`` must be one of them)."""
    names = {p.name for top in TOP for p in (REPO / top).rglob("*.py")}
    return frozenset(names | {"train.py", "evaluate.py"})


def named_paths(page: Path) -> list[tuple[str, Path]]:
    """(as written, where it points) for every repository path ``page`` names."""
    text = page.read_text(encoding="utf-8")
    found = [(m, REPO / m) for m in CODE_PATH.findall(text)]
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        found.append((target, page.parent / target.split("#")[0]))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_named_path_exists(page: Path) -> None:
    missing = [m for m in BARE_MODULE.findall(page.read_text()) if m not in repo_files()]
    for written, path in named_paths(page):
        if written in GENERATED:
            continue
        pattern = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
        exists = any(REPO.glob(pattern)) if "*" in written else path.exists()
        if not exists:
            missing.append(written)
    assert not missing, f"{page.relative_to(REPO)} names paths that do not exist: {missing}"


def test_the_check_sees_paths() -> None:
    """The patterns find what pages name (a check that finds nothing would always pass)."""
    names = [w for w, _ in named_paths(REPO / "README.md")]
    assert "docs/ARCHITECTURE.md" in names and "jobs/README.md" in names
