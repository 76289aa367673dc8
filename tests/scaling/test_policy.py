"""bigearthnet.scaling.policy: grow/shrink decisions on recorded histories, and the controller's
``follow --policy gns`` record of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import history_row

from bigearthnet.cli import elastic as cli
from bigearthnet.core.util import read_csv
from bigearthnet.formats.elastic_log import DECISIONS, append_decision
from bigearthnet.formats.history import HistoryRow
from bigearthnet.scaling.policy import PolicySettings, decide

PER_WORKER = 64


def _history(*epochs: tuple[int, float | None, float]) -> list[HistoryRow]:
    """Rows (world size, B_simple, val micro-F1), one per epoch."""
    return [
        history_row(
            i,
            val_micro_f1=f1,
            val_macro_f1=f1,
            world_size=world,
            global_batch=world * PER_WORKER,
            gns_b_simple=noise,
        )
        for i, (world, noise, f1) in enumerate(epochs, start=1)
    ]


SETTINGS = PolicySettings(max_workers=8, dwell_epochs=2, smoothing=2)


def test_grows_while_the_next_global_batch_stays_below_b_simple() -> None:
    rows = _history((2, 300.0, 0.5), (2, 340.0, 0.6))  # 128 now; B_simple ~320
    decision = decide(rows, SETTINGS)
    assert decision is not None
    assert (decision.verb, decision.workers_after, decision.global_batch_after) == ("grow", 4, 256)
    assert decision.b_simple == pytest.approx(320.0)
    assert "B_simple 320 >= 1 x global batch 256 at 4 workers" in decision.reason


def test_at_most_doubles_and_never_past_max_workers() -> None:
    huge = _history((2, 1e6, 0.5), (2, 1e6, 0.6))
    assert decide(huge, SETTINGS).workers_after == 4  # type: ignore[union-attr]
    capped = _history((6, 1e6, 0.5), (6, 1e6, 0.6))
    assert decide(capped, SETTINGS).workers_after == 8  # type: ignore[union-attr]


def test_margin_keeps_the_batch_further_below_b_simple() -> None:
    rows = _history((2, 300.0, 0.5), (2, 300.0, 0.6))
    careful = PolicySettings(max_workers=8, margin=2.0, dwell_epochs=0)
    decision = decide(rows, careful)
    assert decision is not None and decision.verb == "stay"  # 4 x 64 x 2 > 300


def test_shrinks_when_b_simple_falls_below_the_global_batch() -> None:
    rows = _history((8, 900.0, 0.5), (8, 200.0, 0.6), (8, 180.0, 0.7))  # batch 512
    decision = decide(rows, SETTINGS)
    assert decision is not None
    assert (decision.verb, decision.workers_after) == ("shrink", 2)  # floor(190 / 64) = 2
    assert "< global batch 512" in decision.reason


def test_shrinks_when_validation_plateaus() -> None:
    f1s = [0.50, 0.70, 0.7005, 0.701, 0.7012]  # +0.0012 over the last 3 epochs
    rows = _history(*[(4, 1e6, f1) for f1 in f1s])
    decision = decide(rows, PolicySettings(max_workers=8, dwell_epochs=0, plateau_epochs=3))
    assert decision is not None and decision.verb == "shrink" and decision.workers_after == 2
    assert "plateaued" in decision.reason and "give resources back" in decision.reason


def test_stays_within_the_dwell_time_and_without_a_measurement() -> None:
    rows = _history((2, 1e6, 0.5), (2, 1e6, 0.6), (4, 1e6, 0.7))
    decision = decide(rows, SETTINGS, last_change_epoch=2)
    assert decision is not None and decision.verb == "stay" and "dwell" in decision.reason
    unmeasured = _history((1, None, 0.5), (1, None, 0.6))
    decision = decide(unmeasured, SETTINGS)
    assert decision is not None and decision.verb == "stay" and "no B_simple" in decision.reason
    assert decide([], SETTINGS) is None


def test_decisions_are_recorded_with_their_numbers(tmp_path: Path) -> None:
    rows = _history((2, 300.0, 0.5), (2, 340.0, 0.6))
    decision = decide(rows, SETTINGS)
    assert decision is not None
    append_decision(tmp_path, decision, outcome="submitted holders 12")
    append_decision(tmp_path, decision, outcome="-")
    recorded = read_csv(tmp_path / DECISIONS)
    assert len(recorded) == 2
    first = recorded[0]
    assert (first["verb"], first["workers_before"], first["workers_after"]) == ("grow", "2", "4")
    assert (first["b_simple"], first["global_batch_before"]) == ("320.0", "128")
    assert first["outcome"] == "submitted holders 12"


def test_policy_needs_max_workers_one_line_exit_2(tmp_path: Path, reported_errors) -> None:
    argv = ["--hosts-dir", str(tmp_path), "follow", "--run-dir", str(tmp_path), "--policy", "gns"]
    assert cli.main(argv) == 2
    errors = reported_errors()
    assert len(errors) == 1 and "--policy gns needs --max-workers" in errors[0], errors
    both = [*argv, "--schedule", str(tmp_path / "s.txt")]
    assert cli.main(both) == 2  # a schedule or a policy, not both


def test_a_plateau_at_the_smallest_world_holds_it_there() -> None:
    """Once a plateau has shrunk the run, a large B_simple must not grow it back."""
    f1s = [0.50, 0.70, 0.7005, 0.701, 0.7012]
    rows = _history(*[(2, 1e6, f1) for f1 in f1s])
    settings = PolicySettings(max_workers=8, min_workers=2, dwell_epochs=0, plateau_epochs=3)
    decision = decide(rows, settings)
    assert decision is not None and decision.verb == "stay"
    assert "plateaued" in decision.reason and "smallest world" in decision.reason
