"""``RUN/commands.txt``: every command line that trained in the run folder (a requeued or
resumed run adds a line), its one writer and its one reader.

One line each: the local ISO time, the number of ranks, then the command as a shell would
take it (``shlex.join``), so a person can rerun it and the run page can show it.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.formats.run_folder import COMMANDS


@dataclass(frozen=True)
class RunCommand:
    time: str
    ranks: int
    argv: tuple[str, ...]

    @property
    def text(self) -> str:
        return shlex.join(self.argv)


def append_command(run_dir: str | Path, argv: list[str], ranks: int) -> None:
    """Add the command that (re)started training in ``run_dir`` (rank 0, once its options
    were accepted: a refused resume adds no line)."""
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\t{ranks}\t{shlex.join(argv)}\n"
    with open(Path(run_dir) / COMMANDS, "a", encoding="utf-8") as f:
        f.write(line)


def read_commands(run_dir: str | Path) -> list[RunCommand]:
    """The commands of ``run_dir``, oldest first ([] when none was recorded); lines that do
    not parse (a write cut short) are skipped."""
    path = Path(run_dir) / COMMANDS
    if not path.is_file():
        return []
    commands = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3 and parts[1].isdigit():
            try:
                commands.append(RunCommand(parts[0], int(parts[1]), tuple(shlex.split(parts[2]))))
            except ValueError:
                continue
    return commands
