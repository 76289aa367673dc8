"""bigearthnet-synth region: its options refused before anything is written."""

from __future__ import annotations

import pytest

from bigearthnet.cli.synth import main as synth_main


@pytest.mark.bad_input
@pytest.mark.parametrize("block", ["0", "nan", "inf", "-3600", "1"])
def test_a_block_no_map_can_resolve_is_one_line(tmp_path, reported_errors, bad_input_row, block):
    """Y02 (0, nan, inf, negative: a traceback), Y03 (1 m: minutes, then a .partial folder)."""
    out = tmp_path / "region"
    code = synth_main(["region", str(out), "--tiles", "2", "--dates", "5", "--size", "240",
                       "--block", block])  # fmt: skip
    assert code == 2
    (line,) = reported_errors()
    assert f"--block {float(block)}: metres from 1200" in line, line
    assert list(tmp_path.iterdir()) == []  # neither the folder nor a .partial one
    bad_input_row(f"--block {block}", "bigearthnet-synth region", code,
                  "one line naming --block and its range; nothing written")  # fmt: skip
