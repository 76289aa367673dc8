"""``evaluate.py``'s options, declared once and free of TensorFlow (``--help`` and option
errors answer at once): :class:`EvalOptions`, which :func:`~bigearthnet.evaluation.evaluate.
evaluate_run` takes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.core import constants
from bigearthnet.core.config import TrainConfig, load_run_config
from bigearthnet.core.declare import check_fields, option, reuse
from bigearthnet.core.errors import ConfigError, require_open_fraction, require_positive_int
from bigearthnet.formats import weights_record
from bigearthnet.formats.manifest import Manifest, read_manifest
from bigearthnet.inference.run_checkpoint import RunCheckpoint, run_checkpoint


@dataclass(frozen=True, kw_only=True)
class EvalOptions(RunCheckpoint):
    """Which checkpoint of which run is scored on which split, and where the report goes;
    ``data``, ``threshold`` and ``batch_size`` default to the run's config.yaml."""

    run_dir: Path = reuse(RunCheckpoint, "run_dir", default=dataclasses.MISSING)
    data: Path | None = option(
        None, "folder with the shards and manifest.json (default: data of RUN/config.yaml)",
        metavar="DIR",
    )  # fmt: skip
    split: str = option("test", "split to score", choices=constants.SPLITS)
    out: Path | None = option(None, "report folder (default: RUN/eval-<split>/)", metavar="DIR")
    threshold: float | None = option(
        None, "score threshold inside (0, 1) for F1, precision, recall (default: the "
        "threshold of RUN/config.yaml)", check=require_open_fraction, metavar="T",
    )  # fmt: skip
    batch_size: int | None = option(
        None, "batch size per rank (default: that of RUN/config.yaml)",
        check=require_positive_int, metavar="N",
    )  # fmt: skip
    tune_thresholds: bool = option(
        False, "choose one threshold per class on the val split (best F1) and report the "
        "split with them; saved as OUT/thresholds.json",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)

    def check_inputs(self) -> None:
        """The run, its checkpoint and the shards, read before TensorFlow loads: InputError
        naming the folder or file (a mistyped one answers at once)."""
        run_checkpoint(self.run_dir, self.checkpoint)
        evaluation_data(self.run_dir, self.data)


def evaluation_data(
    run_dir: str | Path, data_dir: str | Path | None
) -> tuple[TrainConfig, Path, Manifest]:
    """The run's options, the shards to score (``data_dir``, by default the run's own) and
    their manifest; ConfigError or ShardError naming the folder otherwise."""
    config = load_run_config(run_dir)
    if data_dir is None and weights_record.is_record_folder(run_dir):
        raise ConfigError(
            f"{run_dir}: a published classifier (bigearthnet-weights run) has no shards of "
            "its own; give --data SHARDS to evaluate it"
        )
    data_dir = Path(data_dir or config.data)
    return config, data_dir, read_manifest(data_dir)
