"""Test helper, run under horovodrun: train like train.py, then each rank writes a digest of
its model weights to RUN/weights-rank<r>.sha256 (identical digests = replicas in sync)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from bigearthnet.cli import train
from bigearthnet.core import distributed
from bigearthnet.core.config import TrainConfig, resolve
from bigearthnet.training import trainer as training


def main() -> int:
    cfg = resolve(train.build_parser().parse_args(sys.argv[1:]), TrainConfig)
    distributed.init(threads=cfg.threads)
    trainer = training.Trainer(cfg)
    trainer.run()
    weights = b"".join(w.tobytes() for w in trainer.model.get_weights())
    digest = hashlib.sha256(weights).hexdigest()
    Path(cfg.run_dir, f"weights-rank{distributed.rank()}.sha256").write_text(digest + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
