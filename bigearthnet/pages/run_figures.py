"""The run page's figures, drawn with matplotlib (inlined as SVG by :mod:`render`): training
curves and scaling over time (throughput, data wait, the noise scale beside the global batch;
for elastic runs the world size, resizes and the controller's decisions on the same epoch
axis). An evaluation's figures are :mod:`bigearthnet.evaluation.plots`'."""

from __future__ import annotations

from collections.abc import Sequence

from bigearthnet.formats.elastic_log import DecisionRecord, ElasticEvent
from bigearthnet.formats.history import HistoryRow


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def training_figure(history: Sequence[HistoryRow]):
    plt = pyplot()
    epochs = [row.epoch for row in history]
    fig, (loss, f1, lr) = plt.subplots(1, 3, figsize=(12, 3.4))
    loss.plot(epochs, [r.loss for r in history], "o-", label="training loss", ms=3)
    loss.plot(epochs, [r.val_loss for r in history], "o-", label="validation loss", ms=3)
    loss.set(xlabel="epoch", title="Loss")
    f1.plot(epochs, [r.val_micro_f1 for r in history], "o-", label="micro-F1", ms=3)
    f1.plot(epochs, [r.val_macro_f1 for r in history], "o-", label="macro-F1", ms=3)
    for key, label in (("val_micro_map", "micro-mAP"), ("val_macro_map", "macro-mAP")):
        points = [(r.epoch, r.score(key)) for r in history if r.score(key) is not None]
        if points:  # rows written before validation gathered scores have none
            f1.plot(*zip(*points), "s--", label=label, ms=3)
    f1.set(xlabel="epoch", title="Validation F1 and mAP", ylim=(0, 1))
    lr.plot(epochs, [r.lr for r in history], "o-", color="tab:purple", ms=3)
    lr.set(xlabel="epoch", title="Learning rate (end of epoch)")
    for ax in (loss, f1):
        ax.legend(fontsize=8)
    _whole_epochs(loss, f1, lr)
    fig.tight_layout()
    return fig


def scaling_figure(
    history: Sequence[HistoryRow],
    events: Sequence[ElasticEvent],
    decisions: Sequence[DecisionRecord],
    *,
    elastic: bool,
):
    """Throughput and data wait, the noise scale beside the global batch, and for an
    elastic run the world size with its resizes and the controller's decisions."""
    plt = pyplot()
    epochs = [row.epoch for row in history]
    fig, axes = plt.subplots(1, 3 if elastic else 2, figsize=(12 if elastic else 9, 3.4))
    speed, noise = axes[0], axes[1]
    speed.plot(epochs, [r.samples_per_s for r in history], "o-", ms=3, label="samples/s")
    speed.set(xlabel="epoch", ylabel="samples/s (all ranks)", title="Throughput and data wait")
    wait = speed.twinx()
    wait.plot(epochs, [100 * r.data_wait_fraction for r in history], "s--", ms=3,
              color="tab:red", label="data wait %")  # fmt: skip
    wait.set_ylabel("data wait (% of step time)")
    noisy = [(r.epoch, r.gns_b_simple) for r in history if r.gns_b_simple is not None]
    batches = [(r.epoch, r.global_batch) for r in history if r.global_batch is not None]
    if noisy:
        noise.plot(*zip(*noisy), "o-", ms=3, color="tab:orange", label="B_simple")
    if batches:
        noise.step(*zip(*batches), where="post", color="tab:blue", label="global batch")
    noise.set(xlabel="epoch", title="Noise scale and global batch")
    if noisy or batches:
        noise.set_yscale("log")
        noise.legend(fontsize=8)
    if elastic:
        _world_panel(axes[2], noise, history, events, decisions)
    _whole_epochs(*axes)
    fig.tight_layout()
    return fig


def _whole_epochs(*axes) -> None:
    """Epoch axes tick at whole epochs (not 2.5, 7.5)."""
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _world_panel(world, noise, history, events, decisions) -> None:
    """The world size over the epochs, each resize a dotted line (on the noise panel too),
    each grow or shrink decision a triangle."""
    epochs = [row.epoch for row in history]
    world.step(epochs, [r.world_size for r in history], where="post", color="tab:green")
    world.set(xlabel="epoch", ylabel="ranks", title="World size, resizes and decisions")
    for event in events:
        if event.event in ("resize", "") and event.new_size is not None:
            for ax in (noise, world):
                ax.axvline(event.epoch, color="grey", linestyle=":", linewidth=1)
    for record in decisions:
        decision = record.decision
        if decision.verb in ("grow", "shrink"):
            marker = "^" if decision.verb == "grow" else "v"
            world.plot(decision.epoch, decision.workers_after, marker, color="black", ms=6)
