"""The one command-line convention (:mod:`bigearthnet.cli.common`): a long option is taken only
as spelled, and a near miss - an abbreviation, a typo, a mistyped choice - is one line naming
what was meant, exit 2. In-process and without TensorFlow: parsing only."""

from __future__ import annotations

import pytest

import train
from bigearthnet.cli import elastic, weights
from bigearthnet.cli.common import did_you_mean

RUN = ["--data", "d", "--run-dir", "r"]


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        ([*RUN, "--epoch", "3"], "'--epochs'"),  # an abbreviation argparse used to take
        ([*RUN, "--epoch=3"], "'--epochs'"),
        ([*RUN, "--warmup", "2"], "'--warmup-epochs' or '--warmup-steps'"),
        ([*RUN, "--optimiser", "adam"], "'--optimizer'"),  # a typo
        ([*RUN, "--optimizer", "lmab"], "'lamb'"),  # a mistyped choice
    ],
    ids=str,
)
def test_a_near_miss_is_refused_naming_what_was_meant(argv, meant, reported_errors) -> None:
    assert train.main(argv) == 2
    (line,) = reported_errors()
    assert f"did you mean {meant}?" in line and line.endswith("(see --help)"), line


def test_sub_parsers_take_no_abbreviation_either(reported_errors) -> None:
    assert elastic.main(["--hosts-dir", "h", "grow", "1", "--slot", "2"]) == 2
    assert "unrecognized arguments: --slot 2; did you mean '--slots'?" in reported_errors()[-1]
    assert weights.main(["imprt"]) == 2
    assert "did you mean 'import'?" in reported_errors()[-1]


def test_did_you_mean_names_only_near_words() -> None:
    known = ["--epochs", "--lr", "--lr-scaling", "--data"]
    assert did_you_mean("--epoch", known) == "; did you mean '--epochs'?"
    assert did_you_mean("--l", known) == "; did you mean '--lr' or '--lr-scaling'?"
    assert did_you_mean("--dat", known) == "; did you mean '--data'?"
    assert did_you_mean("--model", known) == ""
    assert did_you_mean("--lr", known) == "; did you mean '--lr-scaling'?"  # a prefix of it
