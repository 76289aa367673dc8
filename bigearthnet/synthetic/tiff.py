"""Synthetic patches on disk: GeoTIFF bands (uint16 S2, float32 S1) and reference maps
(deflated uint16) written as GDAL writes them, fast.

GDAL writes one template per (size, CRS, nodata, compression); every further file reuses
its header, with the corner coordinates (and a deflated strip's length) patched and the
pixels appended (its tags read by :func:`bigearthnet.preprocessing.geotiff.read_tags`, the
project's one TIFF reader).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import struct
import tempfile
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bigearthnet.core.constants import (
    BANDS,
    PATCH_METRES,
)
from bigearthnet.preprocessing.geotiff import read_tags
from bigearthnet.synthetic import spectra
from bigearthnet.synthetic.landscape import lay_out_parcels
from bigearthnet.synthetic.reference_maps import NODATA as MAP_NODATA
from bigearthnet.synthetic.reference_maps import map_file, patch_maps
from bigearthnet.synthetic.render import (
    PatchJob,
    region_cells,
    render_patch,
    render_s1,
    s1_signatures43,
    signatures43,
)


@dataclass(frozen=True)
class _TiffTemplate:
    header: bytes  # everything before the pixel data, as GDAL writes it
    tiepoint_at: int  # byte offset of the tiepoint's X (Y follows)
    # deflated (one strip): where the strip's byte count is, and its struct code
    length_at: int | None = None
    length_code: str = "<I"


_PROBE_X, _PROBE_Y = 500000.0, 5000040.0


@functools.cache
def _tiff_template(
    size: int, epsg: int, nodata: int | None, dtype: str = "uint16", deflate: bool = False
) -> _TiffTemplate | None:
    """GDAL's own header for a size x size GeoTIFF, or None if its layout is unexpected.

    Opening 12 files a patch through GDAL costs ~15 ms; GDAL writes uncompressed strips (or
    a deflated file's one strip) right after a fixed-size header, so we let it write one
    file per (size, CRS, nodata, compression), keep the header and afterwards only patch
    the corner coordinates (and the strip's length) and append the pixels.
    """
    import rasterio

    # GDAL pads an all-zero last strip to a full block (in /vsimem/ even any strip): write
    # ones to a real file to get the exact layout of a real band.
    profile = geotiff_profile(size, epsg, _PROBE_X, _PROBE_Y, nodata, dtype, deflate)
    with tempfile.TemporaryDirectory(prefix="bigearthnet-synth-") as tmp:
        path = os.path.join(tmp, "template.tif")
        with rasterio.open(path, "w", **profile) as dst:
            dst.write(np.ones((size, size), dtype=dtype), 1)  # all-zero strips get padded
        with open(path, "rb") as fh:
            blob = fh.read()
    tags = read_tags(blob, name="GDAL template")
    offsets, counts = tags.get(273), tags.get(279)
    tiepoint = tags.get(33922)
    if blob[:2] != b"II" or offsets is None or counts is None or tiepoint is None:
        return None
    data_at = offsets[0]
    contiguous = all(o == data_at + sum(counts[:i]) for i, o in enumerate(offsets))
    nbytes = size * size * np.dtype(dtype).itemsize
    if not contiguous or data_at + sum(counts) != len(blob):
        return None
    if (len(counts) != 1) if deflate else (sum(counts) != nbytes):
        return None
    # The tiepoint is 6 doubles (I, J, K, X, Y, Z): find them to patch X and Y per file.
    if tuple(tiepoint[3:5]) != (_PROBE_X, _PROBE_Y):
        return None
    at = blob.find(struct.pack("<6d", *tiepoint))
    if at < 0:
        return None
    template = _TiffTemplate(header=blob[:data_at], tiepoint_at=at + 24)
    if not deflate:
        return template
    where = _inline_value_at(blob, 279)
    if where is None or where[0] >= data_at:
        return None
    return dataclasses.replace(template, length_at=where[0], length_code=where[1])


def _inline_value_at(blob: bytes, tag: int) -> tuple[int, str] | None:
    """(byte offset, struct code) of a single-valued tag's value, held in its IFD entry."""
    (ifd,) = struct.unpack_from("<I", blob, 4)
    (count,) = struct.unpack_from("<H", blob, ifd)
    for i in range(count):
        entry = ifd + 2 + 12 * i
        number, ftype, n = struct.unpack_from("<HHI", blob, entry)
        if number == tag and n == 1 and ftype in (3, 4):
            return entry + 8, "<H" if ftype == 3 else "<I"
    return None


def geotiff_profile(
    size: int,
    epsg: int,
    ulx: float,
    uly: float,
    nodata: int | None,
    dtype: str = "uint16",
    deflate: bool = False,
) -> dict:
    from rasterio.crs import CRS
    from rasterio.transform import Affine

    res = PATCH_METRES / size
    profile = {
        "driver": "GTiff",
        "width": size,
        "height": size,
        "count": 1,
        "dtype": dtype,
        "crs": CRS.from_epsg(epsg),
        "transform": Affine(res, 0.0, ulx, 0.0, -res, uly),
        "nodata": nodata,
    }
    if deflate:  # one strip: its length is the one value a file's header changes
        profile.update(compress="deflate", blockysize=size)
    return profile


def write_band(
    path: os.PathLike | str,
    data: np.ndarray,
    epsg: int,
    ulx: float,
    uly: float,
    nodata: int | None = None,
    deflate: bool = False,
) -> None:
    """Write one band (uint16, or float32 for S1) as GDAL would (uncompressed and striped,
    or ``deflate``: one deflated strip), with its corner at ulx/uly."""
    dtype = "float32" if data.dtype.kind == "f" else "uint16"
    data = np.ascontiguousarray(data, dtype="<f4" if dtype == "float32" else "<u2")
    template = _tiff_template(data.shape[0], epsg, nodata, dtype, deflate)
    if template is None:  # unexpected GDAL layout: slower but always right
        import rasterio

        profile = geotiff_profile(data.shape[0], epsg, ulx, uly, nodata, dtype, deflate)
        with rasterio.open(path, "w", **profile) as dst:
            dst.write(data, 1)
        return
    pixels = zlib.compress(data.tobytes(), 6) if deflate else data.tobytes()  # GDAL's level
    header = bytearray(template.header)
    struct.pack_into("<2d", header, template.tiepoint_at, float(ulx), float(uly))
    if template.length_at is not None:
        struct.pack_into(template.length_code, header, template.length_at, len(pixels))
    with open(path, "wb") as fh:
        fh.write(header)
        fh.write(pixels)


def write_jobs(root: str, seed: int, jobs: Sequence[PatchJob]) -> list[tuple[int, np.ndarray]]:
    """Worker body: render and write a batch of patches; returns (job index, truth: (20, 20)
    19-class indices) of each patch written with a reference map."""
    sig43 = signatures43()
    truths = []
    for job in jobs:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 1, job.index]))
        parcel_of = None
        if job.parcels is not None:  # realistic: class cells laid out by their true shares
            cells, parcel_of = lay_out_parcels(rng, job.parcels)
            bands = spectra.render(rng, cells, job.month, job.region, job.overlay)
        else:
            cells = region_cells(rng, len(job.signature_rows))
            bands = render_patch(rng, sig43[list(job.signature_rows)], job.overlay, cells)
        folder = os.path.join(root, job.rel_dir)
        os.makedirs(folder)
        for band in BANDS:
            path = os.path.join(folder, f"{job.prefix}_{band}.tif")
            write_band(path, bands[band], job.epsg, job.ulx, job.uly, job.nodata)
        if job.metadata_json is not None:
            meta_path = os.path.join(folder, f"{job.prefix}_labels_metadata.json")
            with open(meta_path, "w", encoding="utf-8") as fh:
                fh.write(job.metadata_json)
        if job.s1_dir is not None:
            _write_s1(root, seed, job, cells)
        if job.map_dir is not None:
            truth, codes = patch_maps(seed, job, cells, parcel_of)
            write_band(map_file(root, job), codes, job.epsg, job.ulx, job.uly, MAP_NODATA, True)
            truths.append((job.index, truth))
    return truths


def _write_s1(root: str, seed: int, job: PatchJob, cells: np.ndarray) -> None:
    """The patch's Sentinel-1 folder: VV and VH of the same regions (own random stream, so
    the S2 files are the same with or without S1), and for v1 its labels JSON."""
    assert job.s1_dir is not None and job.s1_prefix is not None
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2, job.index]))
    if job.truth is not None:  # realistic: cells hold 19-class indices
        s1 = render_s1(rng, cells, spectra.S1_DB)
    else:
        s1 = render_s1(rng, cells, s1_signatures43()[list(job.signature_rows)])
    folder = os.path.join(root, job.s1_dir)
    os.makedirs(folder)
    for band, values in s1.items():
        path = os.path.join(folder, f"{job.s1_prefix}_{band}.tif")
        write_band(path, values, job.epsg, job.ulx, job.uly)
    if job.s1_metadata_json is not None:
        with open(os.path.join(folder, f"{job.s1_prefix}_labels_metadata.json"), "w") as fh:
            fh.write(job.s1_metadata_json)
