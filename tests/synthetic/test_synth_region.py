"""bigearthnet-synth region: its options refused before anything is written."""

from __future__ import annotations

import shutil

import pytest

from bigearthnet.cli.synth import main as synth_main
from bigearthnet.synthetic.region import RegionSpec


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


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "flags, needle",
    [(("--size", "1200000"), "--size: 1200000: a multiple of 120 px from 240 to 10980"),
     (("--tiles", "1000000"), "--tiles: 1000000: an even number from 2 to 12"),
     (("--dates", "100000"), "--dates: 100000: from 5 (changes need two dates each side) to 244"),
     (("--tiles", "12", "--dates", "244", "--size", "10920"), "needs ")],
    ids=["size", "tiles", "dates", "largest"],
)  # fmt: skip
def test_a_region_out_of_range_or_too_large_is_refused_before_any_work(
    tmp_path, reported_errors, bad_input_row, flags, needle
):
    """D15, D16: --size 1200000 ran for minutes; --tiles 1000000 and --dates 100000 were
    internal errors (a point outside the projection, a date past year 9999). The largest
    region in range (2,928 scenes of a whole tile) is checked against the disk and memory."""
    if needle == "needs ":
        import psutil

        needs = RegionSpec(tiles=12, dates=244, size=10920).needs()
        fits = needs.disk <= shutil.disk_usage(tmp_path).free
        if fits and needs.memory <= psutil.virtual_memory().available:
            pytest.skip("this machine holds the largest region")
    out = tmp_path / "region"
    code = synth_main(["region", str(out), *flags])
    assert code == 2 and list(tmp_path.iterdir()) == []
    (line,) = reported_errors()
    assert needle in line, line
    verdict = "refused at once: the option's range, or the disk and memory it needs"
    bad_input_row(" ".join(flags), "bigearthnet-synth region", code, verdict)


@pytest.mark.bad_input
def test_a_region_into_a_folder_of_other_files_is_refused(tmp_path, reported_errors, bad_input_row):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    code = synth_main(["region", str(out), "--tiles", "2", "--dates", "5", "--size", "240"])
    assert code == 2 and [p.name for p in out.iterdir()] == ["notes.txt"]
    assert "OUT holds other files (notes.txt) and is no folder of bigearthnet-synth region" in (
        reported_errors()[0])  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    bad_input_row("OUT a folder of other files", "bigearthnet-synth region OUT", code,
                  "refused naming what it holds; nothing touched")  # fmt: skip
