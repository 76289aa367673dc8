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
from bigearthnet.core.errors import ConfigError
from bigearthnet.formats import exported, manifest, weights_record

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


def check_training_folder(run_dir: str | Path) -> None:
    """ConfigError unless train.py may write a run into ``run_dir``: a folder not there yet,
    or one of its own runs. Not a file, not a published classifier's folder (training in it
    would replace its weights and lose where they came from), not an export, not shards."""
    path = Path(run_dir)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{path}: --run-dir exists and is not a folder")
    if weights_record.is_record_folder(path):
        raise ConfigError(
            f"{path}: a published classifier (bigearthnet-weights run), not a training run: "
            f"fine-tune from it with --init-weights {path} and another --run-dir"
        )
    made_by = {exported.INFO_FILE: "an export (bigearthnet-export)",
               manifest.MANIFEST: "a shards folder (bigearthnet-preprocess)"}  # fmt: skip
    for name, what in made_by.items():
        if (path / name).is_file():
            raise ConfigError(f"{path}: {what}, not a training run: give another --run-dir")
