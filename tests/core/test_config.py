"""bigearthnet.core.config: defaults, YAML, flags, and a --help that explains every option."""

from __future__ import annotations

import re
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from helpers import REPO

import train
from bigearthnet.core.config import TrainConfig
from bigearthnet.formats.efficiency import read_efficiency


def test_options_yaml_then_flags(tmp_path: Path, shards_v1: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model: tiny\nepochs: 1\nbatch_size: 16\nlr: 0.5\nmax_steps_per_epoch: 2\n")
    run = tmp_path / "run"
    argv = [
        "--config",
        str(recipe),
        "--data",
        str(shards_v1),
        "--run-dir",
        str(run),
        "--lr",
        "0.001",
        "--no-eval-test",
        "--no-progress",
        "--threads",
        "1",
    ]
    assert train.main(argv) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["batch_size"], saved["lr"], saved["epochs"]) == (16, 0.001, 1)
    report = asdict(read_efficiency(run))
    assert report["per_rank"][0]["samples"] == 2 * 16  # max_steps_per_epoch 2 batches of 16
    assert saved["momentum"] == TrainConfig().momentum  # untouched default
    bad = tmp_path / "bad.yaml"
    bad.write_text("modle: tiny\n")
    assert train.main(["--config", str(bad), "--data", "x", "--run-dir", "y"]) == 2


def test_help_explains_every_option() -> None:
    text = train.build_parser().format_help()
    for flag in (
        "--data",
        "--run-dir",
        "--config",
        "--model",
        "--labels",
        "--epochs",
        "--batch-size",
        "--lr",
        "--warmup-epochs",
        "--schedule",
        "--mixup-alpha",
        "--optimizer",
        "--seed",
        "--amp",
        "--xla",
        "--cache",
        "--no-resume",
        "--fp16-allreduce",
        "--backward-passes-per-step",
        "--horovod-timeline",
        "--grouped-allreduce",
    ):
        assert flag in text, flag


def test_every_flag_passes_through_horovodrun(monkeypatch) -> None:
    """horovodrun parses its whole command line: a train.py or evaluate.py flag that is an
    ambiguous abbreviation of its own options (``--timeline``) would stop it."""
    from horovod.runner import launch

    import evaluate

    for parser in (train.build_parser(), evaluate.build_parser()):
        flags = sorted(set(re.findall(r"(?<![\w-])--[a-z][\w-]*", parser.format_help())))
        assert len(flags) > 5
        for flag in flags:
            command = ["python", parser.prog, flag, "value"]
            monkeypatch.setattr(sys, "argv", ["horovodrun", "-np", "2", *command])
            assert launch.parse_args().command == command, flag


def test_every_recipe_in_configs_resolves() -> None:
    """configs/*.yaml: known keys, valid values; the seed table's global batches and peak
    LRs are what their comments say."""
    from bigearthnet.core.config import resolve

    recipes = sorted((REPO / "configs").glob("*.yaml"))
    assert len(recipes) >= 10
    peaks = {}
    for recipe in recipes:
        args = train.build_parser().parse_args(
            ["--config", str(recipe), "--data", "d", "--run-dir", "r"]
        )
        cfg = resolve(args, TrainConfig)
        peaks[recipe.stem] = cfg.lr
    assert peaks["seed-study-sgd-32k"] * 512 == 12.8
    assert round(peaks["lamb-32k"] * 512, 4) == 0.008


def test_the_reben_recipes_say_what_reben_trained_with() -> None:
    """configs/reben-resnet50-{all,s2}.yaml at 8 ranks: batch 512, AdamW at 1e-3, weight decay
    0.01, dropout 0.15, 1,000 warm-up steps, cosine to lr/10, 100 epochs, best by validation
    macro-AP, early stopping after 5."""
    from bigearthnet.core.config import resolve

    for name in ("all", "s2"):
        args = train.build_parser().parse_args(
            ["--config", str(REPO / f"configs/reben-resnet50-{name}.yaml"), "--data", "d"]
            + ["--run-dir", "r"]
        )
        cfg = resolve(args, TrainConfig)
        assert cfg.batch_plan(8).global_batch == 512 and cfg.lr * 8 == pytest.approx(1e-3)
        assert (cfg.optimizer, cfg.weight_decay, cfg.dropout) == ("adamw", 0.01, 0.15)
        assert (cfg.warmup_steps, cfg.schedule, cfg.epochs) == (1000, "cosine", 100)
        assert cfg.min_lr == pytest.approx(cfg.lr * 8 / 10)
        assert (cfg.select_metric, cfg.early_stopping_patience) == ("val_macro_map", 5)
