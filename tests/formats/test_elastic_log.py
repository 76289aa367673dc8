"""The elastic logs: what is appended is read back as typed records; an old events file
without the event column still reads."""

from __future__ import annotations

from pathlib import Path

from bigearthnet.formats.elastic_log import (
    EVENTS,
    Decision,
    ElasticEvent,
    append_decision,
    append_event,
    read_decisions,
    read_events,
)


def test_events_round_trip(tmp_path: Path):
    assert read_events(tmp_path) == []
    append_event(tmp_path, ElasticEvent("hosts removed", 4, None, 3, 640, 32))
    append_event(tmp_path, ElasticEvent("resize", 4, 2, 3, 640, 32))
    first, second = read_events(tmp_path)
    assert (first.event, first.new_size, second.new_size, second.consumed) == (
        "hosts removed", None, 2, 640,
    )  # fmt: skip
    assert first.time and second.time >= first.time


def test_old_events_without_the_event_column(tmp_path: Path):
    (tmp_path / EVENTS).write_text(
        "time,old_size,new_size,epoch,consumed,batch\n2026-01-01T00:00:00,2,4,5,0,16\n"
    )
    (event,) = read_events(tmp_path)
    assert event == ElasticEvent("", 2, 4, 5, 0, 16, "2026-01-01T00:00:00")


def test_decisions_round_trip(tmp_path: Path):
    assert read_decisions(tmp_path) == []
    decision = Decision(4, 2, 4, 123.456, 64, 128, "B_simple 123 >= 128")
    append_decision(tmp_path, decision, outcome="resized")
    (read,) = read_decisions(tmp_path)
    assert read.decision.b_simple == 123.5  # one decimal in the file
    assert (read.decision.verb, read.decision.reason, read.outcome) == (
        "grow", "B_simple 123 >= 128", "resized",
    )  # fmt: skip
