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
    assert saved["momentum"] == TrainConfig(data="d", run_dir="r").momentum  # the default
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


def _resolved(*argv: str) -> TrainConfig:
    """The options of ``argv`` (with --data d --run-dir r, unless it gives them)."""
    from bigearthnet.core.config import resolve

    given = [] if "--data" in argv else ["--data", "d", "--run-dir", "r"]
    return resolve(train.build_parser().parse_args([*argv, *given]))


def test_a_key_given_twice_is_refused_naming_the_file_key_and_lines(tmp_path: Path) -> None:
    """D24: YAML kept the last of two `lr:` lines without a word."""
    from bigearthnet.core.config import ConfigError

    recipe = tmp_path / "dupkey.yaml"
    recipe.write_text("lr: 0.05\nepochs: 2\nlr: 5.0\n")
    with pytest.raises(ConfigError, match=r"dupkey.yaml: key lr given twice \(lines 1 and 3\)"):
        _resolved("--config", str(recipe))
    nested = tmp_path / "nested.yaml"  # any mapping, at any depth
    nested.write_text("step_epochs: [1]\nlr: 0.1\nx:\n  a: 1\n  a: 2\n")
    with pytest.raises(ConfigError, match="key a given twice"):
        _resolved("--config", str(nested))


def test_repeated_configs_merge_left_to_right(tmp_path: Path) -> None:
    """D24: the first of two --config files was dropped. Now a later file's key wins, the
    others keep their file's value, flags win over both, and an error names the file the
    key came from."""
    base, site = tmp_path / "a.yaml", tmp_path / "b.yaml"
    base.write_text("lr: 0.07\nepochs: 3\nmomentum: 0.8\n")
    site.write_text("epochs: 2\n")
    cfg = _resolved("--config", str(base), "--config", str(site), "--momentum", "0.5")
    assert (cfg.lr, cfg.epochs, cfg.momentum) == (0.07, 2, 0.5)
    base.write_text("dropout: 1.5\n")
    from bigearthnet.core.config import ConfigError

    with pytest.raises(ConfigError, match=r"a.yaml: dropout must be in \[0, 1\)"):
        _resolved("--config", str(base), "--config", str(site))
    site.write_text("dropout: 0.2\n")  # overridden by the later file: the value it kept is fine
    assert _resolved("--config", str(base), "--config", str(site)).dropout == 0.2


def test_print_config_prints_what_a_config_reads_back(tmp_path: Path, capsys) -> None:
    """--print-config: the options as defaults, files and flags resolve them, as YAML that a
    --config reads back to the same options (one key per option, config.yaml's keys); it
    trains nothing and needs no data."""
    from dataclasses import fields

    argv = ["--config", str(REPO / "configs/lamb-16k.yaml"), "--amp", "--step-epochs", "3", "4",
            "--horovod-timeline", "t.json", "--no-gns", "--data", "d", "--run-dir",
            str(tmp_path / "run")]  # fmt: skip
    assert train.main([*argv, "--print-config"]) == 0
    printed = capsys.readouterr().out
    saved = tmp_path / "printed.yaml"
    saved.write_text(printed)
    from bigearthnet.core.config import resolve

    again = resolve(train.build_parser().parse_args(["--config", str(saved)]))  # data too
    assert again == _resolved(*argv) and (again.amp, again.step_epochs) == ("fp16", (3.0, 4.0))
    assert list(yaml.safe_load(printed)) == [f.name for f in fields(TrainConfig)]
    assert not (tmp_path / "run").exists()
