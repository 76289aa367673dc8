"""bigearthnet.core.recipe: which options make a run's recipe, and the one comparison a resume
and the studies make."""

from __future__ import annotations

from dataclasses import fields, replace

from bigearthnet.core.config import TrainConfig
from bigearthnet.core.recipe import LENGTH_OPTIONS, RECIPE_OPTIONS, changes, listed

# What shapes the weights a run's epochs produce, or what their recorded scores mean.
RECIPE = {
    "labels", "model", "freeze_backbone", "dropout", "amp",  # the network and its numerics
    "batch_size", "backward_passes_per_step",  # the batch (per rank, accumulation)
    "lr", "lr_scaling", "warmup_epochs", "warmup_steps", "schedule", "min_lr", "step_epochs",
    "gamma", "gns_decay",  # the LR (gns_decay: the AdaScale gain's averaging)
    "optimizer", "momentum", "weight_decay", "trust_coefficient",
    "mixup_alpha", "augment", "seed",  # what each step sees
    "pixel_loss_weight",  # the loss, and whether the model has the dense head at all
    "max_steps_per_epoch",  # what an epoch is: the schedule's time axis, the samples trained
    "threshold", "precise_bn_samples",  # what validation scores and the checkpoints mean
}  # fmt: skip
# Where, how fast or how visibly it runs; when it stops and which epoch is "best"; the data
# (checked by its shards' identity) and the start (--init-weights: its own rule).
NOT_RECIPE = {
    "data", "run_dir", "cache", "loader_threads", "verify_data", "init_weights", "xla",
    "fp16_allreduce", "grouped_allreduce", "fusion_threshold_mb", "cycle_time_ms", "threads",
    "timeline", "comm_timing", "gns", "elastic", "commit_every", "resume", "force_unlock",
    "allow_new_data", "target_f1", "select_metric", "early_stopping_patience", "eval_test",
    "progress",
}  # fmt: skip


def test_every_option_is_decided_recipe_length_or_neither() -> None:
    """A new option of train.py must be placed here (and marked in TrainConfig) with a
    reason: a resume refuses a change of the recipe, and takes one of anything else."""
    names = {f.name for f in fields(TrainConfig)}
    assert set(RECIPE_OPTIONS) == RECIPE
    assert LENGTH_OPTIONS == ("epochs",)
    assert names == RECIPE | NOT_RECIPE | {"epochs"}


def test_changes_name_each_option_with_its_old_and_new_value() -> None:
    run = TrainConfig(data="d", run_dir="r", model="tiny", lr=0.025, batch_size=8)
    given = replace(run, lr=0.9, batch_size=4, augment=False, step_epochs=[3.0, 4.0])
    assert listed(changes(run, given)) == (
        "--batch-size 8 -> 4, --lr 0.025 -> 0.9, --step-epochs unset -> 3.0,4.0, "
        "--augment true -> false"
    )
    # the world, the machine and the stop criteria are no recipe; the length only on request
    elsewhere = replace(run, threads=2, cache="none", target_f1=0.9, elastic=True, epochs=80)
    assert changes(run, elsewhere) == []
    (longer,) = changes(run, elsewhere, RECIPE_OPTIONS + LENGTH_OPTIONS)
    assert str(longer) == "--epochs 50 -> 80"
    assert changes(run, replace(run, lr=0.025, step_epochs=None)) == []
