"""Small helpers shared by every command: atomic files, hashing, one-line error text."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn


def first_line(err: BaseException) -> str:
    """The first line of an exception's message, or its type name when it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


@contextlib.contextmanager
def atomic_path(final: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it into place only on success.

    A reader never sees a partial file under the final name: a crash leaves at most a
    ``.tmp-*`` file, which the next run ignores or removes.
    """
    final = Path(final)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.tmp-", dir=final.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    # mkstemp creates 0600; give the file the mode a plain open() would (shared project dirs).
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)
    try:
        yield tmp_path
        os.replace(tmp_path, final)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write_text(final: str | Path, text: str) -> None:
    """Write ``text`` to ``final`` atomically (temp file, fsync, rename)."""
    with atomic_path(final) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_json(final: str | Path, obj) -> None:
    atomic_write_text(final, json.dumps(obj, indent=2) + "\n")


def sha256_file(path: str | Path, block: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            digest.update(chunk)
    return digest.hexdigest()


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line and exit code 2, without the usage
    block, like every other error of the project's commands."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
