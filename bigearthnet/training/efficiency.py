"""POP-style efficiency of an epoch from every rank's time split (RUN/efficiency.json).

Each rank measures how long it waited for batches, stepped, and (``--comm-timing``) computed
versus communicated; rank 0 gathers the table and turns it into the factors below, logged
every epoch. ``benchmarks/README.md`` explains how to read them.
"""

from __future__ import annotations

import numpy as np

from bigearthnet.formats.efficiency import EfficiencyReport, RankTimes


def efficiency_report(
    table: np.ndarray, epoch: int, measured_comm: bool = False
) -> EfficiencyReport:
    """POP-style efficiencies of one epoch from per-rank rows
    ``(step_s, wait_s, samples, epoch_s[, compute_s, comm_s])``.

    Useful time is compute (forward + backward) when ``measured_comm`` (--comm-timing),
    else the whole step. With T = max over ranks of (step + data wait), the time the
    epoch's steps took:

    * load_balance = mean(useful) / max(useful)
    * communication_efficiency = max(useful) / max(step): allreduce, update and waiting
      for the slowest rank (null without --comm-timing: the step is not split)
    * input_efficiency = max(step) / T: time not spent waiting for the input pipeline
    * parallel_efficiency = mean(useful) / T = the product of the three
    """
    step, wait, samples, wall = table[:, 0], table[:, 1], table[:, 2], table[:, 3]
    compute = table[:, 4] if measured_comm and table.shape[1] > 5 else None
    comm = table[:, 5] if compute is not None else None
    useful = compute if compute is not None else step
    busy = step + wait
    longest = float(busy.max())
    load_balance = _ratio(useful.mean(), useful.max())
    comm_efficiency = _ratio(useful.max(), step.max()) if compute is not None else None
    input_efficiency = _ratio(step.max(), longest)
    total_rate = float(samples.sum() / longest) if longest > 0 else 0.0
    return EfficiencyReport(
        epoch=epoch,
        world_size=int(len(table)),
        communication_measured=compute is not None,
        per_rank=tuple(
            RankTimes(
                rank=r,
                step_s=float(step[r]),
                compute_s=float(compute[r]) if compute is not None else None,
                communication_s=float(comm[r]) if comm is not None else None,
                data_wait_s=float(wait[r]),
                samples=int(samples[r]),
                samples_per_s=float(samples[r] / busy[r]) if busy[r] > 0 else 0.0,
            )
            for r in range(len(table))
        ),
        load_balance=load_balance,
        communication_efficiency=comm_efficiency,
        input_efficiency=input_efficiency,
        parallel_efficiency=_ratio(useful.mean(), longest),
        data_wait_fraction=float(wait.sum() / busy.sum()) if busy.sum() > 0 else 0.0,
        communication_fraction=float(comm.sum() / busy.sum())
        if comm is not None and busy.sum() > 0
        else None,
        samples_per_s_total=total_rate,
        samples_per_s_per_rank=total_rate / len(table),
        epoch_seconds_max=float(wall.max()),
    )


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b > 0 else 1.0


def efficiency_line(report: EfficiencyReport) -> str:
    """The report as one log line (max over ranks of each time)."""
    ranks = report.per_rank
    wait = max(r.data_wait_s for r in ranks)
    if report.communication_measured:
        compute = max(r.compute_s or 0.0 for r in ranks)
        comm = max(r.communication_s or 0.0 for r in ranks)
        split = f"compute {compute:.2f} s, communication {comm:.2f} s"
        comm_eff = f"{report.communication_efficiency:.3f}"
    else:
        split = f"step {max(r.step_s for r in ranks):.2f} s (--comm-timing splits it)"
        comm_eff = "n/a"
    return (
        f"efficiency epoch {report.epoch}: {split}, data wait {wait:.2f} s "
        f"(max over {report.world_size} ranks); load balance {report.load_balance:.3f}, "
        f"communication {comm_eff}, input {report.input_efficiency:.3f}, parallel "
        f"{report.parallel_efficiency:.3f}; {report.samples_per_s_total:.1f} samples/s "
        f"total, {report.samples_per_s_per_rank:.1f} per rank"
    )
