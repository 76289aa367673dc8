"""The files of a run folder, named once: every module that writes or reads one of them takes
its name from here (the format modules keep their own reader and writer).

``RUN/`` holds ``config.yaml`` (the resolved options), ``checkpoints/``, ``history.csv``,
``efficiency.json``, ``status.json`` once the run ended, ``commands.txt``,
``elastic_events.csv`` and ``elastic_decisions.csv`` (elastic runs), ``tensorboard/``,
``eval-<split>/`` (``metrics.json``, ``per_class.csv``, ``predictions.h5``, plots),
``maps/`` (previews the run page shows) and ``report.html``.
"""

from __future__ import annotations

from pathlib import Path

from bigearthnet.core.config import RUN_CONFIG

CONFIG = RUN_CONFIG  # core.config reads and writes it (below this layer)
CHECKPOINTS = "checkpoints"
HISTORY = "history.csv"
EFFICIENCY = "efficiency.json"
STATUS = "status.json"
COMMANDS = "commands.txt"
ELASTIC_EVENTS = "elastic_events.csv"
ELASTIC_DECISIONS = "elastic_decisions.csv"
TENSORBOARD = "tensorboard"
MAPS = "maps"
REPORT = "report.html"
METRICS = "metrics.json"  # inside an evaluation folder
EVAL_PREFIX = "eval-"


def eval_dir(run_dir: str | Path, split: str) -> Path:
    """The default evaluation folder of ``split``: ``RUN/eval-<split>``."""
    return Path(run_dir) / f"{EVAL_PREFIX}{split}"


def eval_dirs(run_dir: str | Path) -> list[Path]:
    """The run's evaluation folders that hold metrics, sorted."""
    return [
        folder
        for folder in sorted(Path(run_dir).glob(f"{EVAL_PREFIX}*"))
        if (folder / METRICS).is_file()
    ]
