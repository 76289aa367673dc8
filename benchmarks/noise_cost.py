"""P8: what the gradient-noise-scale monitor and precise BN cost a training run.

Side by side, runs interleaved, train.py with ResNet-50 on 1 rank (the benchmark recipe):

* P8-gns = samples/s with the monitor (the default) / samples/s with ``--no-gns``. The
  monitor's work per update: the squared norm of the local gradients, one more scalar in
  the loss allreduce, and the squared norm of the allreduced gradients. (With 1 rank the
  estimate itself is "n/a", but every norm is computed all the same: the cost is the cost
  of a multi-rank run.) Target >= 0.98: at most 2 % of the step time.
* P8-pbn = precise BN's time per sample / a training step's time per sample, from the
  default runs' efficiency.json: forward passes in training mode over the samples, without
  backward pass or update. Expected about a third; what it costs per epoch is this times
  ``--precise-bn-samples`` / the samples of an epoch (4096 of BigEarthNet v1's 270k train
  patches: ~0.5 % of an epoch at 0.33).
"""

from __future__ import annotations

from pathlib import Path

import common
from common import Figure


def run(args, work: Path) -> list[Figure]:
    data = common.train_shards(work)
    runs: dict[str, list[dict]] = {}

    def variant(name: str, extra: list[str]):
        def measure(rep: int) -> float:
            out = common.train_run(data, work / f"p8-{name}-{rep}", 1, extra, f"train.py {name}")
            runs.setdefault(name, []).append(out)
            return out["samples_per_s"]

        return measure

    common.say(f"P8: ResNet-50, batch {common.TRAIN_BATCH}, 1 rank x 1 thread, monitor on/off")
    rates = common.interleave(
        {"monitor": variant("monitor", []), "no monitor": variant("no-gns", ["--no-gns"])},
        args.repeats,
        common.say,
    )
    per_sample = []
    for out in runs["monitor"]:
        bn = out["efficiency"]["precise_bn"]
        if bn["samples"]:
            per_sample.append((bn["seconds"] / bn["samples"]) * out["samples_per_s"])
    return [
        Figure(
            "P8-gns",
            "train.py samples/s with the noise-scale monitor / --no-gns, 1 rank, ResNet-50",
            common.paired_ratio(rates["monitor"], rates["no monitor"]),
            "x",
            ">=",
            0.98,
            "two squared norms over the gradients and one scalar more in the loss allreduce",
            rates,
        ),
        Figure(
            "P8-pbn",
            "precise BN time per sample / training time per sample, 1 rank, ResNet-50",
            common.median(per_sample),
            "x",
            "<=",
            0.5,
            "forward in training mode only; x --precise-bn-samples / epoch samples per epoch",
            {"per_run": per_sample},
        ),
    ]


def build_parser():
    return common.base_parser(__doc__.splitlines()[0])


if __name__ == "__main__":
    raise SystemExit(common.run_cli(build_parser(), run))
