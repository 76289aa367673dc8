"""Everything a run folder says about its run, read through each file's one reader, and
what is missing. A half-written run (no evaluation yet, no checkpoint, training data gone)
still has facts; a folder without a single history row is not a run (:class:`ReportError`).
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from bigearthnet.core import display
from bigearthnet.core.config import TrainConfig, load_run_config
from bigearthnet.core.errors import InputError
from bigearthnet.evaluation.summary import EvalSummary, read_metrics
from bigearthnet.formats import checkpoints, run_folder
from bigearthnet.formats.checkpoints import CheckpointError, CheckpointRecord
from bigearthnet.formats.class_map import areas_path, transitions_path
from bigearthnet.formats.efficiency import EfficiencyReport, read_efficiency
from bigearthnet.formats.elastic_log import (
    DecisionRecord,
    ElasticEvent,
    read_decisions,
    read_events,
)
from bigearthnet.formats.history import HistoryRow, read_history
from bigearthnet.formats.manifest import Manifest, read_manifest
from bigearthnet.formats.run_command import RunCommand, read_commands
from bigearthnet.formats.run_status import RunStatus, read_status
from bigearthnet.formats.shards import ShardError
from bigearthnet.pages.region_link import region_folders, region_pages
from bigearthnet.pages.run_maps import RunMaps, run_maps

MAX_PREVIEWS = 12
KINDS = ("scene", "change", "other")  # the order maps are shown in


class ReportError(InputError):
    """A folder that cannot have a run page."""


@dataclass(frozen=True)
class MapPreview:
    name: str  # path relative to the run folder
    kind: str  # one of KINDS
    data_uri: str  # the PNG inline


@dataclass(frozen=True)
class MapPreviews:
    """The previews the page shows (scene maps first, then change maps, then the rest) of
    ``total`` under ``folder`` (relative to the run folder)."""

    shown: list[MapPreview]
    total: int
    folder: str


@dataclass
class RunFacts:
    run_dir: Path
    config: TrainConfig
    history: list[HistoryRow]
    status: RunStatus | None
    best: CheckpointRecord | None
    latest: CheckpointRecord | None
    manifest: Manifest | None
    efficiency: EfficiencyReport | None
    evaluations: list[EvalSummary]
    events: list[ElasticEvent]
    decisions: list[DecisionRecord]
    previews: MapPreviews
    scene_maps: RunMaps = field(default_factory=RunMaps)  # the map viewer's
    commands: list[RunCommand] = field(default_factory=list)  # every (re)start, oldest first
    missing: list[str] = field(default_factory=list)  # what the page cannot show, and why
    regions: list[str] = field(default_factory=list)  # region pages of this model, relative

    @property
    def wall_seconds(self) -> float:
        return sum(row.seconds for row in self.history)

    @property
    def accelerator_seconds(self) -> float:
        """Sum over epochs of seconds x ranks: what the run cost, resizes included."""
        return sum(row.seconds * row.world_size for row in self.history)

    @property
    def world_sizes(self) -> list[int]:
        return sorted({row.world_size for row in self.history})

    @property
    def elastic(self) -> bool:
        """Whether the world could change: an elastic run, or one that did change."""
        return (
            bool(self.config.elastic or self.events or self.decisions) or len(self.world_sizes) > 1
        )

    @property
    def config_items(self) -> list[tuple[str, object]]:
        """The resolved configuration, paths as a shared page shows them."""
        return [
            (key, display.shown_value(value, self.run_dir))
            for key, value in dataclasses.asdict(self.config).items()
        ]

    def shown(self, path: str | Path) -> str:
        """A path of the run as the page shows it (relative to the run, or its base name)."""
        return display.shown_path(path, self.run_dir)


def read_run(run_dir: Path) -> RunFacts:
    """The facts of ``run_dir``; ReportError when it has no config or no history row."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: no such run folder")
    try:
        config = load_run_config(run_dir)
    except InputError as err:
        raise ReportError(f"{run_dir}: not a run folder ({err})") from None
    history = read_history(run_dir)
    if not history:
        raise ReportError(
            f"{run_dir}: no history.csv rows: no epoch has finished, nothing to report yet"
        )
    # Absolute from here, so that the run's own files (evaluations, checkpoints) show
    # relative to it however the folder was named on the command line.
    run_dir = run_dir.absolute()
    missing: list[str] = []
    best, latest = _pointer(run_dir, "best", missing), _pointer(run_dir, "latest", missing)
    manifest = _manifest(config, missing)
    evaluations = _evaluations(run_dir, missing)
    status = read_status(run_dir)
    if status is None:
        missing.append("status.json: the run is still going, was stopped, or crashed")
    maps = run_dir / run_folder.MAPS
    regions = region_folders(maps)
    scene_maps = run_maps(run_dir, maps, regions)
    missing.extend(scene_maps.left_out)
    return RunFacts(
        run_dir=run_dir,
        config=config,
        history=history,
        status=status,
        best=best,
        latest=latest,
        manifest=manifest,
        efficiency=_efficiency(run_dir, missing),
        evaluations=evaluations,
        events=read_events(run_dir),
        decisions=read_decisions(run_dir),
        previews=_previews(run_dir, regions, scene_maps.not_previewed),
        scene_maps=scene_maps,
        commands=read_commands(run_dir),
        missing=[display.shown_text(item, run_dir) for item in missing],
        regions=region_pages(run_dir),
    )


def _pointer(run_dir: Path, tag: str, missing: list[str]) -> CheckpointRecord | None:
    try:
        record = checkpoints.read_pointer(run_dir, tag)
    except CheckpointError as err:
        missing.append(f"the '{tag}' checkpoint pointer: {err}")
        return None
    if record is None:
        missing.append(f"a '{tag}' checkpoint")
    return record


def _manifest(config: TrainConfig, missing: list[str]) -> Manifest | None:
    try:
        return read_manifest(config.data)
    except ShardError as err:
        missing.append(f"the training data's manifest ({err})")
        return None


def _evaluations(run_dir: Path, missing: list[str]) -> list[EvalSummary]:
    found = []
    for folder in run_folder.eval_dirs(run_dir):
        found.append(read_metrics(folder))
    if not found:
        missing.append(
            "an evaluation: run evaluate.py --run-dir RUN (this folder) for test metrics, "
            "per-class F1 and PR curves"
        )
    return found


def _efficiency(run_dir: Path, missing: list[str]) -> EfficiencyReport | None:
    try:
        report = read_efficiency(run_dir)
    except InputError as err:
        missing.append(str(err))
        return None
    if report is None:
        missing.append(f"{run_folder.EFFICIENCY}: no efficiency report")
    return report


def _previews(run_dir: Path, regions: list[Path], left: frozenset[Path]) -> MapPreviews:
    """PNG previews of maps written under RUN/maps/ (bigearthnet-map --out RUN/maps/...):
    scene maps first, then change maps, then the rest (patch maps), each kind by name; the
    first MAX_PREVIEWS are inlined. A region series' folder (in ``regions``) is left out:
    its own page shows it, and the run page links to it; so are the maps in ``left`` (the
    map viewer shows them, or they are not this run's)."""
    found = [
        path
        for path in (run_dir / run_folder.MAPS).rglob("*.png")
        if not any(path.is_relative_to(region) for region in regions)
        and path.with_suffix(".tif") not in left
    ]
    ranked = sorted(found, key=lambda path: (KINDS.index(_kind(path)), str(path)))
    shown = []
    for path in ranked[:MAX_PREVIEWS]:
        encoded = base64.b64encode(path.read_bytes()).decode("ascii")
        name = path.relative_to(run_dir).as_posix()
        shown.append(MapPreview(name, _kind(path), f"data:image/png;base64,{encoded}"))
    return MapPreviews(shown, len(found), f"{run_folder.MAPS}/")


def _kind(preview: Path) -> str:
    """What the map behind a preview is, by the companions its writer puts beside it."""
    map_path = preview.with_suffix(".tif")
    if areas_path(map_path).is_file():
        return "scene"
    if transitions_path(map_path).is_file():
        return "change"
    return "other"
