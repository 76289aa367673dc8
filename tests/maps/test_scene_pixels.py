"""Scene maps at 10 m from the dense head (bigearthnet/maps/scene/pixels.py, tiles.py): the
scene's 10 m grid, the same map whatever the tiling, every form, --bbox, 1 or 2 ranks, a
run folder or an export; --stride still gives the classifier's cell map.

The tolerance of two tilings: a model's context (how far a pixel's logits reach: the tiny
model 24 px, ResNet-50 278) lies inside its margin (48 px, 288), so each kept pixel is the
same computation in either tiling, up to float32 rounding of convolutions run at other
window sizes (oneDNN picks kernels by shape: ~1e-6).
Stored as round(p x 250), a probability may then round to the next step: 1 step (0.004)
apart at most, and the top class the same wherever its lead over the second class is more
than one step."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import rasterio
from helpers import horovodrun

from bigearthnet import models
from bigearthnet.cli.export import main as export_main
from bigearthnet.cli.map import main as map_main
from bigearthnet.core import distributed
from bigearthnet.core.errors import InputError
from bigearthnet.formats.class_map import NODATA, probabilities_path
from bigearthnet.maps.scene.input import Scene
from bigearthnet.maps.scene.pixels import predict_pixels, window_shape
from bigearthnet.maps.scene.tiles import (
    LATTICE,
    MAX_WINDOW,
    Tiling,
    default_window,
    far_edge,
    margin_for,
    memory_window,
)
from bigearthnet.synthetic.scene import PRODUCT, SceneTruth, write_scene

TRUTH = SceneTruth(size=480, block=240, border=24, classes=((0, 8), (11, 16)),
                   cloud=(60, 300, 180, 420))  # fmt: skip
FORMS = ("safe", "zarr", "stac", "tif")
WINDOW = "288"  # small windows: several per scene, so seams would show


def _scene(root: Path, form: str) -> Path:
    out = root / form / (f"{PRODUCT}.SAFE" if form == "safe" else "scene")
    return write_scene(out, TRUTH, seed=4, layout=form, difficulty="simple")


@pytest.fixture(scope="module")
def tif_scene(tmp_path_factory) -> Path:
    return _scene(tmp_path_factory.mktemp("pixels"), "tif")


@pytest.fixture(scope="module")
def form_scenes(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pixel-forms")
    return {form: _scene(root, form) for form in FORMS}


def _map(scene: Path, out: Path, *model: str) -> tuple[np.ndarray, np.ndarray]:
    argv = ["scene", str(scene), *model, "--out", str(out), "--no-progress"]
    assert map_main(argv) == 0
    return _read(out)


def _read(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with rasterio.open(path) as top, rasterio.open(probabilities_path(path)) as scores:
        return top.read(1), scores.read().astype(int)


def _assert_same_map(a, b, what: str) -> None:
    """Within the tolerance of the module's docstring."""
    (top_a, p_a), (top_b, p_b) = a, b
    np.testing.assert_array_equal(top_a == NODATA, top_b == NODATA, err_msg=what)
    assert np.abs(p_a - p_b).max() <= 1, what
    ranked = np.sort(p_a, axis=0)
    lead = ranked[-1] - ranked[-2]
    differ = (top_a != top_b) & (lead > 1)
    assert not differ.any(), f"{what}: {differ.sum()} px of another class"


def _mosaic(parts, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    top = np.full((height, width), NODATA, np.uint8)
    scores = np.full((19, height, width), NODATA, np.uint8)
    for part in parts:
        with rasterio.open(part.path) as src:
            bands = src.read()
        top[part.row : part.row + part.height] = bands[0]
        scores[:, part.row : part.row + part.height] = bands[1:]
    return top, scores.astype(int)


TILINGS = (Tiling(192), Tiling(288, phase=96), Tiling(960))  # the last: one window


def _same_map_from_every_tiling(run: Path, scene_path: Path, work: Path) -> np.ndarray:
    """The top class of ``scene_path`` mapped with each of :data:`TILINGS` (other windows,
    other seams, the same pixels: the module docstring's tolerance)."""
    from bigearthnet.inference.trained_run import load_model

    distributed.init()
    loaded = load_model(run)
    maps, seams = [], []
    for i, tiling in enumerate(TILINGS):
        (work / str(i)).mkdir(parents=True)
        with Scene(scene_path, bands=loaded.bands, mask_clouds=True) as scene:
            model = loaded.pixel_model(window_shape(scene, tiling))
            made = predict_pixels(scene, model, tiling, resampling=loaded.resampling,
                                  work=work / str(i))  # fmt: skip
            maps.append(_mosaic(made.parts, scene.height, scene.width))
        seams.append({part.row for part in made.parts})
    assert seams[0] != seams[1] and seams[2] == {0}
    for found, tiling in zip(maps[1:], TILINGS[1:], strict=True):
        _assert_same_map(maps[0], found, f"tiling of {tiling.window} px, phase {tiling.phase}")
    return maps[0][0]


def test_a_shifted_tiling_gives_the_same_map(trained_head_run, tif_scene, tmp_path) -> None:
    """Windows of 192 px, of 288 px shifted by 96, and the whole scene in one (a window of
    960 px, cut to the scene's 480): other windows, other seams, windows that end at the
    scene's far edge at other places, the same pixels (module docstring: the tolerance);
    clouds and the border are nodata."""
    top = _same_map_from_every_tiling(trained_head_run, tif_scene, tmp_path)
    assert top.shape == (480, 480) and top[0, 0] == NODATA and top[120, 360] == NODATA  # cloud
    assert (top != NODATA).mean() > 0.6


@pytest.mark.slow  # a scene of its own: ~15 s
def test_windows_at_a_far_edge_off_the_lattice_give_the_same_map(
    trained_head_run, tmp_path
) -> None:
    """A 474 px scene without a nodata border (its far edge 6 px short of the lattice's
    480: 0 there, then the model's padding): windows of 192 px, of 288 px shifted by 96,
    and the whole scene in one window of 480 px (the cores of the first two end at other
    places, their last windows at 480 like the third's): the same pixels up to the edge."""
    truth = SceneTruth(size=474, block=237, border=0, classes=((0, 8), (11, 16)))
    scene = write_scene(tmp_path / "scene", truth, seed=4, layout="tif", difficulty="simple")
    top = _same_map_from_every_tiling(trained_head_run, scene, tmp_path / "maps")
    assert top.shape == (474, 474) and (top != NODATA).all()  # up to the far edge


@pytest.mark.slow  # four forms, an export, two --bbox maps: ~60 s
def test_every_form_a_bbox_and_an_export_give_the_same_10m_map(
    trained_head_run, form_scenes, tmp_path
) -> None:
    """The same map from every form (they share Scene), on the scene's 10 m grid, tagged
    with what made it; a --bbox map is the whole map's pixels there; an export's map is
    the run's; --stride 60 still makes the classifier's 600 m cells."""
    run = ("--run-dir", str(trained_head_run), "--window", WINDOW)
    maps = {form: _map(path, tmp_path / f"{form}.tif", *run) for form, path in form_scenes.items()}
    for form, found in maps.items():
        _assert_same_map(maps["safe"], found, form)
    with rasterio.open(tmp_path / "safe.tif") as src:
        tags, transform = src.tags(), src.transform
        assert src.res == (10.0, 10.0) and src.overviews(1) == []  # 480 px: one 512 px tile
    assert tags["head"] == "dense head (per pixel)" and tags["cell_m"] == "10"
    assert tags["margin_px"] == "48"  # the tiny CNN's
    assert "stride_px" not in tags and tags["model"] == "tiny"
    # --bbox: 1.5 x 2.1 km inside the scene, widened to the 60 m grid
    x0, y0 = transform.c + 1210, transform.f - 2330
    bbox = f"{x0},{y0 - 2100},{x0 + 1500},{y0}"
    top, scores = _map(form_scenes["safe"], tmp_path / "bbox.tif", *run, "--bbox", bbox)
    with rasterio.open(tmp_path / "bbox.tif") as src:
        col, row = (round(v) for v in ~transform @ (src.transform.c, src.transform.f))
    whole_top, whole_scores = maps["safe"]
    window = (slice(row, row + top.shape[0]), slice(col, col + top.shape[1]))
    _assert_same_map(
        (top, scores), (whole_top[window], whole_scores[:, window[0], window[1]]), "--bbox"
    )
    # --window 384: the area with its margins (cols 0-384, rows 96-480) is one window
    one = _map(form_scenes["safe"], tmp_path / "bbox1.tif", *run[:2], "--window", "384",
               "--bbox", bbox)  # fmt: skip
    _assert_same_map(one, (top, scores), "--bbox in one window")
    export = tmp_path / "export"
    assert export_main([str(trained_head_run), "--out", str(export)]) == 0
    exported = _map(form_scenes["tif"], tmp_path / "export.tif", "--model", str(export),
                    "--window", WINDOW)  # fmt: skip
    _assert_same_map(maps["tif"], exported, "export")
    cells, _ = _map(form_scenes["tif"], tmp_path / "cells.tif", *run[:2], "--stride", "60")
    with rasterio.open(tmp_path / "cells.tif") as src:
        assert src.res == (600.0, 600.0) and src.tags()["head"].startswith("classifier")
    assert cells.shape == (8, 8)


@pytest.mark.slow
@pytest.mark.horovod
def test_two_ranks_give_the_10m_map_of_one(trained_head_run, tif_scene, tmp_path) -> None:
    """Each rank its rows of windows, part files in a shared folder, rank 0 the map."""
    found = {}
    for ranks in (1, 2):
        out = tmp_path / f"ranks{ranks}.tif"
        argv = ["-m", "bigearthnet.cli.map", "scene", str(tif_scene), "--run-dir",
                str(trained_head_run), "--out", str(out), "--window", "192",
                "--no-progress"]  # fmt: skip
        done = horovodrun(ranks, *argv)
        assert done.returncode == 0, done.stderr[-3000:]
        found[ranks] = _read(out)
    np.testing.assert_array_equal(found[1][0], found[2][0])
    np.testing.assert_array_equal(found[1][1], found[2][1])
    assert not list(tmp_path.glob(".*"))  # the part files are gone


@pytest.mark.parametrize("model", models.available_models())
def test_each_models_default_tiling_keeps_its_context_and_covers_the_area(model) -> None:
    """At each model's margin and default window, on the lattice and shifted, for a whole
    tile, a part of it, a scene off the lattice and one smaller than the window, a --bbox
    area that fits in one window with its context: the kept parts cover the area, every
    window on the lattice and of the same size, each kept pixel at least the model's
    margin from its window's borders, or its window at the scene's edge (the far edge:
    the scene's extent rounded up to the lattice); a scene or an area that fits in the
    window with its context is one window; a whole tile computes each pixel at most 2.25
    times (the ResNets: 10 windows of 1,632 px a side, 2.21x)."""
    margin = margin_for(model)
    assert margin >= models.DENSE_CONTEXT[model] and margin % (LATTICE // 2) == 0
    window = default_window(margin)
    areas = ((0, 10980, 10980), (960, 1728, 10980), (0, 1830, 1830), (0, 1728, 1728),
             (600, 1230, 1830), (0, 444, 444))  # fmt: skip
    for phase, (start, size, extent) in itertools.product((0, LATTICE), areas):
        tiling = Tiling(window, phase=phase, margin=margin)
        side, edge = tiling.side(start, size, extent), far_edge(extent)
        found = tiling.windows(start, size, extent)
        assert found[0][1] == 0 and found[-1][2] == size and side <= window
        assert all(a[2] == b[1] for a, b in zip(found, found[1:], strict=False))
        for origin, begin, end in found:
            assert (start + origin) % LATTICE == 0 and 0 <= start + origin <= edge - side
            assert start + origin == 0 or begin - origin >= margin
            assert start + origin + side == edge or origin + side - end >= margin
        if edge <= window or (start, size, margin) == (600, 1230, 288):  # one window fits
            assert len(found) == 1 and tiling.one_window(start, size, extent) is not None
        if (phase, start, size) == (0, 0, 10980):  # the maps' tiling, a whole tile
            assert (len(found) * side / size) ** 2 <= 2.25


def test_the_default_window_is_the_largest_that_fits_and_no_larger_than_the_scene() -> None:
    """Sized to the memory (the bytes a px each model declares), up to MAX_WINDOW, on the
    lattice; the windows of a scene no larger than it are the scene's far edges."""
    assert memory_window("resnet50", 8.95e9) == 2976  # 17.9 GB free, one rank
    assert memory_window("resnet50", 1e12) == MAX_WINDOW == memory_window("tiny", 1e12)
    assert memory_window("resnet50", 1000 * 700**2) == 672  # its least window
    with pytest.raises(InputError, match="least window of resnet50, 672 px"):
        memory_window("resnet50", 1000 * 660**2)
    tiling = Tiling(memory_window("resnet50", 8.95e9), margin=margin_for("resnet50"))
    sides = [tiling.side(0, extent, extent) for extent in (1728, 1830, 10980)]
    assert sides == [1728, 1920, 2688]
    assert tiling.side(5000, 1500, 10980) == 2112  # a --bbox area: one window, its context


RESNET_BEYOND = 96  # the scene around the cut window on every side, on the lattice


@pytest.mark.slow  # ResNet-50 at 864 and 672 px: ~30 s alone, minutes on a busy machine
def test_resnet50_pixels_past_the_margin_do_not_see_the_cut(tif_scene) -> None:
    """ResNet-50 with the dense head (seeded random weights: seams are a matter of the
    architecture, not of training): its least window, cut out of the scene, keeps past its
    margin (:func:`~bigearthnet.maps.scene.tiles.margin_for`: 288 px, the receptive
    field's half-width 278 rounded up) what a window with the scene around the cut gives,
    within the module docstring's tolerance (float rounding: one stored step; the class
    the same where the top two are more than a step apart). With the 48 px margin of
    before, 20 % of the pixels 48-64 px from a cut took another class (docs/maps.md)."""
    import tensorflow as tf

    from bigearthnet import models
    from bigearthnet.inference.pixel_model import PixelModel, rebuilt
    from bigearthnet.maps.scene.tiles import least_window, margin_for
    from bigearthnet.maps.scene.windows import WindowBands
    from bigearthnet.preprocessing.assembly import assemble

    distributed.init(threads=1)
    bands = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B11", "B12")
    with Scene(tif_scene, bands=bands, mask_clouds=False) as scene:
        size = scene.height
        rect = scene.rect(0, 0, size, size)
        image = assemble(WindowBands(rect.bands), "bilinear", tuple(rect.bands), size=size)
    margin = margin_for("resnet50")
    window = least_window(margin)
    whole_size = window + 2 * RESNET_BEYOND
    # The 480 px scene mirrored out to the larger window: real pixels, no edge inside.
    pad = (whole_size - size) // 2
    image = np.pad(image, ((pad, whole_size - size - pad), (pad, whole_size - size - pad),
                           (0, 0)), mode="symmetric")  # fmt: skip
    tf.keras.utils.set_random_seed(0)
    weights = models.get_model("resnet50", (96, 96, 12), 19, dense_head=True).get_weights()

    def stored(pixels: np.ndarray) -> np.ndarray:
        side = pixels.shape[0]
        model = rebuilt("resnet50", side, 12, 19, lambda m: m.set_weights(weights))
        found = PixelModel(model, np.full(12, 1000.0), np.full(12, 1000.0), side)(pixels[None])
        return np.rint(np.moveaxis(found[0], -1, 0) * 250).astype(int)

    cut_area = (slice(RESNET_BEYOND, RESNET_BEYOND + window),) * 2
    whole = stored(image)[:, cut_area[0], cut_area[1]]
    cut = stored(image[cut_area])
    core = (slice(None), *(slice(margin, window - margin),) * 2)
    whole, cut = whole[core], cut[core]
    _assert_same_map((whole.argmax(axis=0), whole), (cut.argmax(axis=0), cut), "ResNet-50's cut")
