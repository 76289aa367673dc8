"""``bigearthnet-map``: land-cover GeoTIFFs from a trained run or an export.

* ``bigearthnet-map [patches]``: the patches of an archive or of shards
  (:mod:`bigearthnet.maps.patches`);
* ``bigearthnet-map scene``: a whole Sentinel-2 scene (:mod:`bigearthnet.maps.scene.mapping`);
* ``bigearthnet-map change A B``: two scene maps compared (:mod:`bigearthnet.maps.change`);
* ``bigearthnet-map region``: a region over time (:mod:`bigearthnet.cli.map_region`).

Each sub-command's options are one declaration (the dataclasses below and the ones they
nest); this module parses them, checks that ``--out`` overlaps no input
(:mod:`bigearthnet.cli.map_out`), and calls the package.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bigearthnet.cli.common import Command, Parser, declared_parser, dispatch
from bigearthnet.cli.map_out import check_out
from bigearthnet.core import constants
from bigearthnet.core.declare import from_args, nested, option
from bigearthnet.core.folders import check_output
from bigearthnet.inference.predictor import ModelChoice
from bigearthnet.maps.change import ChangeOptions
from bigearthnet.maps.patches import (
    OWNER,
    PROG,
    MapError,
    MapFile,
    PatchMapOptions,
    archive_batches,
    predict_places,
    shard_batches,
    write_maps,
)
from bigearthnet.maps.scene.options import SceneMapOptions
from bigearthnet.maps.scene.output import require_map_path


@dataclass(frozen=True)
class PatchesCommand:
    """``bigearthnet-map [patches]``."""

    model: ModelChoice = nested(ModelChoice)
    maps: PatchMapOptions = nested(PatchMapOptions)


@dataclass(frozen=True)
class SceneCommand:
    """``bigearthnet-map scene``."""

    scene: Path = option(
        help="an L2A .SAFE product folder (JPEG 2000 bands), an EOPF Zarr product (.zarr, "
        ".zarr.zip), a STAC item file (or FILE#ID: an item of a saved search) with COG assets, "
        "a folder of single-band GeoTIFFs named by band (*B02*.tif ...), or one multi-band "
        "GeoTIFF at 10 m (see --band-order)",
        positional=True, metavar="INPUT",
    )  # fmt: skip
    out: Path = option(help="the map to write (a GeoTIFF; its preview MAP.png beside it)",
                       check=require_map_path, metavar="MAP.tif")  # fmt: skip
    model: ModelChoice = nested(ModelChoice)
    map: SceneMapOptions = nested(SceneMapOptions)


def build_parser() -> Parser:
    return declared_parser(
        PROG,
        "Predict every patch of an archive or of preprocessed shards with a trained run and "
        "write land-cover maps whose pixels are the 1.2 km patches, one per CRS and 1.2 km "
        "lattice (per Sentinel-2 tile): a Cloud-Optimized GeoTIFF of the top class with its "
        "colour table, class names and QGIS style (.qml), the class probabilities x 250 in "
        "<name>.tif.probabilities.tif (255 = nodata), plus PNG previews.",
        PatchesCommand,
    )


def build_scene_parser() -> Parser:
    return declared_parser(
        f"{PROG} scene",
        "Land-cover map of a whole Sentinel-2 scene: from a model with the dense head, a "
        "class per 10 m pixel (large --window squares run fully convolutionally, their "
        "borders discarded); with --stride (and from a classifier-only model), 120x120 px "
        "windows slid by it, probabilities averaged where windows overlap. A Cloud-Optimized "
        "GeoTIFF with a colour table and one probability band per class, and the area per "
        "class. Memory: one window's activations (checked first), or one strip of 120 px "
        "windows (~32 MB for a 10,980 px tile) and a batch.",
        SceneCommand,
    )


def build_change_parser() -> Parser:
    return declared_parser(
        f"{PROG} change",
        "How the land cover changed between two scene maps of one place (bigearthnet-map "
        "scene outputs): a Cloud-Optimized GeoTIFF on A's grid with from*100+to where the top "
        "class changed (0 = no change, 65534 = below --min-prob, 65535 = nodata in either "
        "map), the transitions in km^2 (CHANGE.tif.transitions.csv) and a preview "
        "(CHANGE.png). B is resampled onto A's grid (nearest) if they differ.",
        ChangeOptions,
    )


def _region_parser() -> Parser:
    from bigearthnet.cli.map_region import build_region_parser

    return build_region_parser()


def _map_region(args: argparse.Namespace) -> None:
    from bigearthnet.cli.map_region import map_region_command

    map_region_command(args)


def main(argv: list[str] | None = None) -> int:
    """``bigearthnet-map scene ...`` maps a Sentinel-2 scene, ``bigearthnet-map change A B``
    compares two scene maps, ``bigearthnet-map region`` maps a region over time; without a
    sub-command (or with ``patches``) the patches of an archive or of shards."""
    commands = {
        "patches": Command("maps of the patches of an archive or of shards (1.2 km pixels)",
                           build_parser, _map),
        "scene": Command("a map of a whole Sentinel-2 scene", build_scene_parser, _map_scene),
        "change": Command("the change between two scene maps of one place",
                          build_change_parser, _map_change),
        "region": Command("a region over time: its scenes -> one consistent series of maps",
                          _region_parser, _map_region),
    }  # fmt: skip
    return dispatch(argv, commands, prog=PROG, default="patches")


def _inputs(opts: PatchMapOptions, loaded, skipped: list) -> tuple[int, Iterator]:
    from bigearthnet.inference.predictor import check_bands

    if opts.shards is not None:
        from bigearthnet.formats.manifest import read_manifest

        manifest = read_manifest(opts.shards)
        check_bands(loaded, manifest.bands, f"shards {opts.shards}")
        splits = list(opts.split or constants.SPLITS)
        return shard_batches(opts.shards, manifest, splits, opts.batch_size)
    assert opts.archive is not None  # PatchMapOptions: one of them
    # The archive reader reads whichever bands the model takes, in its order.
    return archive_batches(
        opts.archive,
        opts.version,
        opts.resampling or loaded.resampling,
        opts.batch_size,
        opts.include_snow_cloud,
        skipped,
        bands=tuple(loaded.bands),
        s1_root=opts.s1_archive,
    )


def _check_inputs(command: PatchesCommand) -> None:
    """What is read before TensorFlow loads (a mistyped folder answers at once): the model's
    folder, and the shards' manifest or the archive's layout (read again with the model)."""
    from bigearthnet.formats.manifest import read_manifest
    from bigearthnet.preprocessing.archive import detect_version

    command.model.check()
    opts = command.maps
    if opts.shards is not None:
        read_manifest(opts.shards)
    elif opts.archive is not None and opts.version == "auto":
        detect_version(opts.archive)


def make_maps(command: PatchesCommand) -> list[MapFile]:
    """Predict and write; raises MapError (and the readers' InputErrors) on bad input."""
    opts = command.maps
    check_out(opts.out, command.model, shards=opts.shards, archive=opts.archive,
              s1_archive=opts.s1_archive)  # fmt: skip
    check_output(opts.out, OWNER, replace=opts.overwrite)  # before the work, not after it
    _check_inputs(command)
    loaded = command.model.open()
    skipped: list[tuple[str, str]] = []
    total, batches = _inputs(opts, loaded, skipped)
    places, scores = predict_places(loaded, batches, total, opts.progress)
    for name, reason in skipped[:5]:
        print(f"{PROG}: skipped {name}: {reason}", file=sys.stderr)
    if not places:
        raise MapError(f"no patch to map ({len(skipped)} unreadable)")
    files = write_maps(opts.out, places, scores, loaded, overwrite=opts.overwrite)
    print(
        f"[map] {len(places)} patches ({len(skipped)} skipped) -> {len(files)} GeoTIFF(s) "
        f"in {opts.out}: " + ", ".join(f"{f.name}.tif" for f in files)
    )
    return files


def _map(args: argparse.Namespace) -> None:
    # TensorFlow's C++ INFO lines (oneDNN, CPU features) would bury the one-line messages.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    make_maps(from_args(PatchesCommand, args))


def _map_scene(args: argparse.Namespace) -> None:
    from bigearthnet.maps.inputs import identify

    command = from_args(SceneCommand, args)
    scene = identify(command.scene)  # its form, decided once: the scene carries the answers
    check_out(command.out, command.model, scenes=(scene,))
    command.model.check()
    # Only now TensorFlow (distributed and the scene map import it): the checks above answer
    # at once. TF's C++ INFO lines (oneDNN, CPU features) would bury the one-line messages.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from bigearthnet.core import distributed
    from bigearthnet.core.config import default_threads
    from bigearthnet.maps.scene.mapping import map_scene

    # Before the model loads: TensorFlow's thread pools can only be sized before it starts.
    distributed.init(threads=default_threads())
    map_scene(scene, command.out, command.map, command.model.open())


def _map_change(args: argparse.Namespace) -> None:
    from bigearthnet.maps.change import map_change

    opts = from_args(ChangeOptions, args)
    check_out(opts.out, before=opts.before, after=opts.after)
    summary = map_change(opts)
    print(
        f"[map] {opts.out}: {summary.changed_km2:,.2f} km² changed in {summary.transitions} "
        f"transition(s), {summary.stable_km2:,.2f} km² unchanged, "
        f"{summary.uncertain_km2:,.2f} km² below --min-prob"
    )


if __name__ == "__main__":
    sys.exit(main())
