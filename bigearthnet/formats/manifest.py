"""``manifest.json``, the preprocessed dataset's contract (:class:`Manifest`): the shards
it lists (:class:`ShardEntry`, each checked against its file by :func:`verify_shard`), their
counts, bands, statistics, resampling and origin. :func:`write_manifest` is its one writer
(preprocessing writes it last: its presence means the folder is complete) and
:func:`read_manifest` its one reader. The shards themselves: :mod:`.shards`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from bigearthnet.core import constants
from bigearthnet.core.util import atomic_write_json, first_line, sha256_file
from bigearthnet.formats.archive_origin import ORIGINS, UNKNOWN, ArchiveOrigin
from bigearthnet.formats.shard_maps import MapStats
from bigearthnet.formats.shards import FORMAT_VERSION, ShardError, image_shape

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class ShardEntry:
    """One shard as the manifest lists it."""

    file: str  # a plain file name inside the data folder
    split: str
    count: int
    sha256: str

    def path(self, data_dir: str | Path) -> Path:
        return Path(data_dir) / self.file


@dataclass(frozen=True)
class Manifest:
    """``manifest.json``: what preprocessing wrote and how (the only contract between
    preprocessing and training, evaluation and maps). :func:`write_manifest` is its one
    writer and :func:`read_manifest` its one reader."""

    shards: tuple[ShardEntry, ...]
    counts: dict[str, int]
    label_sets: tuple[int, ...] = (19,)  # 43 too for v1 sources
    band_mean: tuple[float, ...] | None = None  # train split, per band; None: no train split
    band_std: tuple[float, ...] | None = None
    resampling: str = "bilinear"
    archive: str = ""
    archive_version: str = ""
    split_source: str = ""
    seed: int | None = None
    created: str = ""
    command: str = ""
    summary: dict[str, int] = field(default_factory=dict)  # found, written, rejected, excluded
    plan_id: str = ""
    bands: tuple[str, ...] = constants.BANDS  # a configuration of constants.BAND_CONFIGS
    channel_scale: tuple[float, ...] | None = None  # per channel: value = code*scale+offset
    channel_offset: tuple[float, ...] | None = None  # (None: S2 only, written before S1)
    # where the archive came from (formats.archive_origin): synthetic, real, or unknown in
    # manifests written before it was recorded; origin_detail: how a synthetic one was made
    origin: str = UNKNOWN
    origin_detail: str = ""
    format_version: int = FORMAT_VERSION
    reference_maps: MapStats | None = None  # None: no maps (formats/shard_maps.py)

    @property
    def archive_origin(self) -> ArchiveOrigin:
        return ArchiveOrigin(self.origin, self.origin_detail)

    @property
    def band_config(self) -> str:
        """The configuration's name (s2, s2-10, s1, all); read_manifest refuses others."""
        return constants.band_config_name(self.bands) or "?"

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return image_shape(len(self.bands))

    @property
    def has_maps(self) -> bool:
        """Whether the shards hold reference maps (``map19``, ``has_map``)."""
        return self.reference_maps is not None

    def map_count(self, split: str) -> int:
        """Rows of ``split`` that hold a reference map (0 without maps)."""
        if self.reference_maps is None:
            return 0
        return int(self.reference_maps.patches.get(split, 0))

    def split_shards(self, split: str) -> list[ShardEntry]:
        """The shards of one split, in index order."""
        return [s for s in self.shards if s.split == split]

    def count(self, split: str) -> int:
        return int(self.counts.get(split, 0))

    @property
    def data_id(self) -> str:
        """The identity of these shards' contents: a digest of every shard's split, count
        and sha256. A copy or a move of the folder keeps it; another preprocessing (other
        patches, splits, shard size or resampling) changes it."""
        entries = sorted((s.file, s.split, s.count, s.sha256) for s in self.shards)
        return hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:16]

    def to_json(self) -> dict:
        """The manifest as written to disk (with the fixed facts readers may want)."""
        body = dataclasses.asdict(self)
        body.update(
            band_config=self.band_config,
            image_shape=list(self.image_shape),
            dtype="uint16",
            classes19=list(constants.CLASSES_19),
            classes43=list(constants.CLASSES_43) if 43 in self.label_sets else None,
            reference_maps=None if self.reference_maps is None else self.reference_maps.to_json(),
        )
        return body


REQUIRED = ("format_version", "shards", "counts", "bands")


def write_manifest(data_dir: str | Path, manifest: Manifest) -> Path:
    """Write ``manifest.json`` atomically (preprocessing writes it last: its presence means
    the folder is complete)."""
    path = Path(data_dir) / MANIFEST
    atomic_write_json(path, manifest.to_json())
    return path


def read_manifest(data_dir: str | Path) -> Manifest:
    """Load and check ``manifest.json``; ShardError with a one-line reason otherwise."""
    data_dir = Path(data_dir)
    path = data_dir / MANIFEST
    if not data_dir.is_dir():
        raise ShardError(f"{data_dir}: data folder does not exist")
    if not path.is_file():
        raise ShardError(f"{path}: no manifest (preprocessing not run or not finished)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ShardError(f"{path}: unreadable manifest ({first_line(err)})") from None
    if not isinstance(raw, dict):
        raise ShardError(f"{path}: not a manifest (expected a JSON object)")
    missing = set(REQUIRED) - set(raw)
    if missing:
        raise ShardError(f"{path}: manifest lacks {', '.join(sorted(missing))}")
    if raw["format_version"] != FORMAT_VERSION:
        raise ShardError(
            f"{path}: format version {raw['format_version']}, this code reads {FORMAT_VERSION}"
        )
    if constants.band_config_name(list(raw["bands"])) is None:
        raise ShardError(
            f"{path}: bands {raw['bands']} are none of the configurations "
            f"{', '.join(constants.BAND_CONFIGS)}"
        )
    if raw.get("origin", UNKNOWN) not in ORIGINS:
        raise ShardError(f"{path}: origin {raw['origin']!r} is none of {', '.join(ORIGINS)}")
    try:
        return _manifest_from_json(raw, path)
    except (KeyError, TypeError, ValueError) as err:
        raise ShardError(f"{path}: malformed manifest ({first_line(err)})") from None


def _manifest_from_json(raw: dict, path: Path) -> Manifest:
    shards = tuple(_shard_entry(s, path) for s in raw["shards"])
    known = {f.name for f in dataclasses.fields(Manifest)}
    values = {k: v for k, v in raw.items() if k in known}

    def floats(key: str) -> tuple[float, ...] | None:
        return tuple(float(v) for v in raw[key]) if raw.get(key) is not None else None

    values.update(
        shards=shards,
        counts={str(k): int(v) for k, v in raw["counts"].items()},
        label_sets=tuple(int(v) for v in raw.get("label_sets") or (19,)),
        band_mean=floats("band_mean"),
        band_std=floats("band_std"),
        channel_scale=floats("channel_scale"),
        channel_offset=floats("channel_offset"),
        bands=tuple(raw["bands"]),
        summary=dict(raw.get("summary") or {}),
        reference_maps=MapStats.from_json(raw["reference_maps"])
        if raw.get("reference_maps") is not None
        else None,
    )
    return Manifest(**values)


def _shard_entry(raw: dict, path: Path) -> ShardEntry:
    name = str(raw["file"])
    # A manifest is data, not a path to follow: a shard outside its folder is refused.
    if Path(name).name != name or name in ("", ".", ".."):
        raise ShardError(f"{path}: shard name {name!r} is not a plain file name")
    return ShardEntry(name, str(raw["split"]), int(raw["count"]), str(raw["sha256"]))


def split_shards(manifest: Manifest, split: str) -> list[ShardEntry]:
    """The manifest's shard entries of one split, in index order."""
    return manifest.split_shards(split)


def verify_shard(data_dir: str | Path, entry: ShardEntry) -> None:
    """Check a shard exists and its sha256 matches the manifest; ShardError otherwise."""
    path = entry.path(data_dir)
    if not path.is_file():
        raise ShardError(f"{path}: shard listed in the manifest is missing")
    digest = sha256_file(path)
    if digest != entry.sha256:
        raise ShardError(f"{path}: sha256 {digest[:12]}... differs from the manifest's")
