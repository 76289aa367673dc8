"""Training, evaluation and maps on the band configurations: all (S1 + S2-10) and s2-10
learn as the 12-band runs do, 'best' follows --select-metric, and a model of one
configuration refuses data of another."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import pytest
from helpers import assert_scores_close, preprocess, train_argv

import evaluate
import train
from bigearthnet.core import constants
from bigearthnet.formats.checkpoints import read_pointer
from bigearthnet.formats.history import read_history
from bigearthnet.formats.manifest import read_manifest

EPOCHS = 4  # enough for a best epoch to choose; learning is compared in the slow test
LEARN_EPOCHS = 12  # at 6 epochs a tiny model's val micro-F1 still varies by ~0.08 a run


# Its module fixtures train or evaluate: all its tests in one xdist worker, built once.
pytestmark = pytest.mark.xdist_group("band-configs")


@pytest.fixture(scope="module")
def config_shards(tmp_path_factory) -> dict[str, Path]:
    """A v1 archive with Sentinel-1, preprocessed in the configurations all, s2-10 and s2."""
    from bigearthnet.synthetic.archive import ArchiveSpec, generate_archive

    root = tmp_path_factory.mktemp("configs")
    archive = root / "v1"
    generate_archive(archive, ArchiveSpec(240, layout="v1", seed=7, s1=True, difficulty="simple"))
    shards = {}
    for config in ("all", "s2-10", "s2"):
        out = root / config
        extra = ["--s1-archive", str(archive / "BigEarthNet-S1-v1.0")] if config == "all" else []
        assert preprocess(archive, out, "--shard-size", "32", "--bands", config, *extra) == 0
        shards[config] = out
    return shards


@pytest.fixture(scope="module")
def config_runs(config_shards: dict[str, Path], tmp_path_factory) -> dict[str, Path]:
    """The tiny model trained on each configuration; 'all' picks its best by macro mAP.
    The s2-10 run is only refused data and maps a scene: one epoch (its learning is the
    slow test's). Neither's learning is asserted here: epochs of 4 steps."""
    runs = {}
    for config, epochs in (("all", EPOCHS), ("s2-10", 1)):
        data = config_shards[config]
        run = tmp_path_factory.mktemp("runs") / config
        extra = ["--select-metric", "val_macro_map"] if config == "all" else []
        extra += ["--max-steps-per-epoch", "4"]
        assert train.main(train_argv(data, run, epochs, *extra)) == 0
        runs[config] = run
    return runs


def split_micro_f1(run: Path, out: Path) -> float:
    assert evaluate.main(["--run-dir", str(run), "--out", str(out)]) == 0
    return json.loads((out / "metrics.json").read_text())["micro_f1"]


@pytest.mark.slow
def test_every_configuration_learns_as_the_12_bands_do(
    config_shards: dict[str, Path], tmp_path: Path
) -> None:
    """The same recipe, patches and epochs on each configuration: the best validation
    micro-F1 of all and s2-10 within 0.05 of the 12 bands' (measured: all 0.671, s2 0.676,
    s1 alone 0.30 after 12 epochs), and evaluate.py scores each on its own test split."""
    best, tested = {}, {}
    for config, data in config_shards.items():
        run = tmp_path / config
        assert train.main(train_argv(data, run, LEARN_EPOCHS)) == 0
        best[config] = max(r.val_micro_f1 for r in read_history(run))
        tested[config] = split_micro_f1(run, tmp_path / f"eval-{config}")
        record = read_pointer(run, "best")
        assert record is not None and record.bands == constants.BAND_CONFIGS[config]
        assert record.input_shape == (120, 120, len(record.bands))
    for config in ("all", "s2-10"):
        assert best[config] >= best["s2"] - 0.05, (best, tested)
        assert tested[config] >= tested["s2"] - 0.08, (best, tested)


def test_best_is_the_epoch_with_the_highest_chosen_metric(config_runs: dict[str, Path]) -> None:
    rows = read_history(config_runs["all"])
    assert len(rows) == EPOCHS and all(r.val_macro_map is not None for r in rows)
    maps = [r.val_macro_map for r in rows]
    best = read_pointer(config_runs["all"], "best")
    assert best is not None and best.epoch == maps.index(max(maps)) + 1
    assert best.val_macro_map == pytest.approx(max(maps))
    # validation mAPs are those of the gathered scores: in [0, 1], micro >= a chance level
    assert all(0.0 < r.val_micro_map <= 1.0 for r in rows)


def test_a_model_refuses_data_of_another_configuration(
    config_runs: dict[str, Path],
    config_shards: dict[str, Path],
    tmp_path: Path,
    reported_errors,
) -> None:
    from bigearthnet.cli import map as map_cli

    run, shards_v1 = config_runs["all"], config_shards["s2"]
    code = evaluate.main(
        ["--run-dir", str(run), "--out", str(tmp_path / "e"), "--data", str(shards_v1)]
    )
    assert code == 2
    err = reported_errors()
    assert len(err) == 1 and f"shards {shards_v1} gives bands s2 (B01," in err[0]
    assert "takes all (VV,VH,B02," in err[0] and "another band configuration" in err[0]
    assert not (tmp_path / "e").exists()
    argv = ["--run-dir", str(config_runs["s2-10"]), "--shards", str(config_shards["all"])]
    assert map_cli.main([*argv, "--out", str(tmp_path / "m")]) == 2
    assert "gives bands all (VV,VH," in reported_errors()[-1]


def test_scene_maps_read_the_model_s2_bands(
    config_runs: dict[str, Path], tmp_path: Path, reported_errors
) -> None:
    """An s2-10 model maps a scene from its ten bands (a band stack without B01/B09 will
    do); a model with Sentinel-1 refuses scenes (out of scope), one line, exit 2."""
    import numpy as np
    import rasterio

    from bigearthnet.cli import map as map_cli
    from bigearthnet.synthetic.scene import SceneTruth, write_scene

    scene = tmp_path / "scene.tif"
    write_scene(
        scene,
        SceneTruth(size=240, block=120, border=0, classes=((3, 8), (9, 2))),
        layout="stack",
        difficulty="simple",
    )
    with rasterio.open(scene) as src:  # keep the ten bands the model takes, renamed by order
        keep = [i for i, d in enumerate(src.descriptions) if d in constants.S2_10_BANDS]
        ten, profile = src.read([i + 1 for i in keep]), dict(src.profile, count=len(keep))
    ten_bands = tmp_path / "ten.tif"
    with rasterio.open(ten_bands, "w", **profile) as dst:
        dst.write(ten)
        dst.descriptions = tuple(constants.S2_10_BANDS)
        dst.scales, dst.offsets = (1e-4,) * len(keep), (0.0,) * len(keep)  # offset-free DN
    out = tmp_path / "map.tif"
    argv = ["scene", str(ten_bands), "--run-dir", str(config_runs["s2-10"]), "--out", str(out)]
    assert map_cli.main([*argv, "--no-mask-clouds"]) == 0  # a stack: no SCL
    with rasterio.open(out) as src:
        assert src.count >= 1 and np.isin(src.read(1), np.arange(19)).any()
    argv = ["scene", str(scene), "--run-dir", str(config_runs["all"]), "--out", str(tmp_path / "x")]
    assert map_cli.main([*argv[:-1], str(tmp_path / "x.tif")]) == 2
    assert "a Sentinel-1 scene map is out of scope" in reported_errors()[-1]


def test_an_s1_s2_model_exports_with_its_channels(
    config_runs: dict[str, Path], config_shards: dict[str, Path], tmp_path: Path
) -> None:
    """The export of an 'all' run takes 12 channels in reBEN's order; the card says what an
    S1 value means; the STAC item validates; the SavedModel equals the run's model."""

    from bigearthnet.cli.export import main as export_main
    from bigearthnet.export.stac import validate_item
    from bigearthnet.inference.exported_model import ExportedModel
    from bigearthnet.inference.trained_run import load_model

    out = tmp_path / "export"
    run = config_runs["all"]
    assert export_main([str(run), "--out", str(out), "--format", "savedmodel"]) == 0
    card = (out / "model_card.md").read_text()
    assert "(band configuration\n**all**)" in card
    assert "| 0 | VV | 10 |" in card and "dB = value x 0.002 -80 |" in card
    validate_item(json.loads((out / "item.json").read_text()))
    exported = ExportedModel(out)
    assert tuple(exported.bands) == constants.BAND_CONFIGS["all"]
    test = read_manifest(config_shards["all"]).split_shards("test")[0]
    with h5py.File(test.path(config_shards["all"]), "r") as f:
        images = f["images"][:8]
    want = load_model(run).predict(images)
    assert_scores_close(exported.predict(images), want)
