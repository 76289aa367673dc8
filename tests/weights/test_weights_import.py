"""bigearthnet-weights import: timm/torchvision ResNet state dicts -> the registry's Keras
ResNets, checked against timm's own forward pass (a narrow ResNet-50 kept in the tests,
its logits recorded by timm: scripts/make_weights_fixture.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, assert_close_to_scale
from safetensors.numpy import load_file
from safetensors.numpy import save_file as _save_file

from bigearthnet.cli.weights import main
from bigearthnet.core import constants
from bigearthnet.formats import weights_record
from bigearthnet.models.resnet import BN_EPSILON, build_resnet
from bigearthnet.weights import convert, sources
from scripts.make_weights_fixture import inputs_digest, reference_inputs

FIXTURE = REPO / "tests" / "fixtures" / "weights" / "timm_resnet50_narrow"
FACTS = json.loads(FIXTURE.with_suffix(".json").read_text())


def narrow_model(bands: int = 12, num_classes: int | None = 19):
    """The registry's ResNet-50 builder at the fixture's widths."""
    return build_resnet(
        (3, 4, 6, 3),
        True,
        input_shape=(120, 120, bands),
        num_classes=num_classes or 1,
        widths=tuple(FACTS["widths"]),
        head=num_classes is not None,
    )


def imported_logits(folder: Path, x: np.ndarray, num_classes: int | None = 19) -> np.ndarray:
    model = narrow_model(x.shape[-1], num_classes)
    model.load_weights(str(folder / weights_record.WEIGHTS_FILE), by_name=True)
    return model(x, training=False).numpy()


def save_file(tensors: dict[str, np.ndarray], path: str) -> None:
    """safetensors writes an array's buffer as it lies: fancy-indexed arrays need a copy."""
    _save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path)


def run_import(src: Path, out: Path, *flags: str) -> int:
    return main(["import", str(src), "--out", str(out), *flags])


@pytest.fixture(scope="module")
def fixture_tensors() -> dict[str, np.ndarray]:
    return load_file(str(FIXTURE.with_suffix(".safetensors")))


def test_constants_match_the_model():
    assert convert.KERAS_BN_EPSILON == BN_EPSILON
    assert sources.TORCH_BN_EPSILON == 1e-5


def test_logits_equal_timms_forward_pass(tmp_path, capsys):
    x = reference_inputs()
    assert inputs_digest(x) == FACTS["inputs"]["sha256"], "NumPy's generator changed its stream"
    assert run_import(FIXTURE.with_suffix(".safetensors"), tmp_path / "w") == 0
    logits = imported_logits(tmp_path / "w", x)
    reference = np.asarray(FACTS["logits"], np.float32)
    assert_close_to_scale(logits, reference)
    record = weights_record.read(tmp_path / "w")
    assert record.bands == constants.BANDS and record.classes == constants.CLASSES_19
    assert record.adaptations == ()
    assert "[weights] timm resnet50" in capsys.readouterr().out


def test_a_wrapper_prefix_is_taken_off(tmp_path, fixture_tensors, capsys):
    wrapped = {f"model.encoder.{k}": v for k, v in fixture_tensors.items()}
    wrapped["model.loss.weight"] = np.ones(3, np.float32)  # a Lightning module keeps more
    save_file(wrapped, str(tmp_path / "wrapped.safetensors"))
    assert run_import(tmp_path / "wrapped.safetensors", tmp_path / "w") == 0
    x = reference_inputs()
    assert_close_to_scale(imported_logits(tmp_path / "w", x), FACTS["logits"])
    err = capsys.readouterr().err
    assert "took the key prefix 'model.encoder.' off" in err and "model.loss.weight" in err


@pytest.mark.bad_input
def test_a_reben_file_imported_as_timm_is_refused_with_the_source_to_use(
    tmp_path, fixture_tensors, reported_errors, bad_input_row
):
    """P32: ConfigILM's prefix names reBEN; read as timm its channels and head were wrong."""
    wrapped = {f"model.vision_encoder.{k}": v for k, v in fixture_tensors.items()}
    save_file(wrapped, str(tmp_path / "reben.safetensors"))
    code = run_import(tmp_path / "reben.safetensors", tmp_path / "w")  # --source timm: default
    assert code == 2
    (line,) = reported_errors()
    assert "laid out as reben weights" in line and "--source reben" in line, line
    assert not (tmp_path / "w").exists()
    bad_input_row("a reBEN file (model.vision_encoder. keys) with the default --source timm",
                  "bigearthnet-weights import", code, "refused: names --source reben")  # fmt: skip


@pytest.mark.bad_input
def test_an_mlp_head_is_named_where_it_is_dropped_and_makes_no_run(
    tmp_path, fixture_tensors, reported_errors, bad_input_row
):
    """P11: a head of fc.0 (hidden) and fc.3 (classes) was dropped without a word."""
    rng = np.random.default_rng(4)
    tensors = {k: v for k, v in fixture_tensors.items() if not k.startswith("fc.")}
    features = fixture_tensors["fc.weight"].shape[1]
    tensors |= {
        "fc.0.weight": rng.standard_normal((32, features)).astype(np.float32),
        "fc.0.bias": np.zeros(32, np.float32),
        "fc.3.weight": rng.standard_normal((19, 32)).astype(np.float32),
        "fc.3.bias": np.zeros(19, np.float32),
    }
    src = tmp_path / "mlp.safetensors"
    save_file(tensors, str(src))
    assert run_import(src, tmp_path / "w") == 0
    record = weights_record.read(tmp_path / "w")
    assert not record.has_head
    assert any("dropped the head fc.0, fc.3" in note for note in record.adaptations)
    code = main(["run", str(src), "--out", str(tmp_path / "r")])
    assert code == 2
    (line,) = reported_errors()
    assert "has a head of fc.0, fc.3 (not one linear layer)" in line, line
    assert not (tmp_path / "r").exists()
    bad_input_row("an MLP head (fc.0, fc.3)", "bigearthnet-weights import | run", code,
                  "import: dropped and named in weights.json; run: refused, naming it")  # fmt: skip


@pytest.mark.bad_input
def test_run_on_an_imagenet_head_advises_the_import_that_drops_it(
    tmp_path, fixture_tensors, reported_errors, bad_input_row
):
    """P24: the advice was `--no-head`, an option `run` does not have."""
    rng = np.random.default_rng(5)
    tensors = dict(fixture_tensors)
    features = fixture_tensors["fc.weight"].shape[1]
    tensors["fc.weight"] = rng.standard_normal((1000, features)).astype(np.float32)
    tensors["fc.bias"] = np.zeros(1000, np.float32)
    src = tmp_path / "imagenet.safetensors"
    save_file(tensors, str(src))
    code = main(["run", str(src), "--out", str(tmp_path / "r")])
    assert code == 2
    (line,) = reported_errors()
    assert "a head of 1000 classes" in line and "`bigearthnet-weights import --no-head`" in line
    bad_input_row("a 1000-class (ImageNet) head", "bigearthnet-weights run", code,
                  "refused: says to import the backbone with --no-head")  # fmt: skip


def test_ssl4eo_13_bands_drop_b10(tmp_path, fixture_tensors):
    """An SSL4EO-style stem of 13 L1C bands: B10's filters go, the rest is the 12-band model."""
    stem = fixture_tensors["conv1.weight"]
    b10 = np.random.default_rng(5).standard_normal(stem[:, :1].shape).astype(np.float32)
    tensors = dict(fixture_tensors)
    tensors["conv1.weight"] = np.concatenate([stem[:, :10], b10, stem[:, 10:]], axis=1)
    for key in ("fc.weight", "fc.bias"):  # SSL4EO backbones come without a head
        tensors.pop(key)
    save_file(tensors, str(tmp_path / "ssl4eo.safetensors"))
    assert run_import(tmp_path / "ssl4eo.safetensors", tmp_path / "w", "--source", "ssl4eo") == 0
    record = weights_record.read(tmp_path / "w")
    assert record.bands == constants.BANDS and not record.has_head
    assert record.mean == (0.0,) * 12 and record.std == (10000.0,) * 12
    assert any("dropped the filters of B10" in note for note in record.adaptations)
    x = reference_inputs()
    features = imported_logits(tmp_path / "w", x, num_classes=None)
    expected_model = narrow_model()
    _load_converted(expected_model, fixture_tensors)
    pooled = expected_model.get_layer("avg_pool").output
    import tensorflow as tf

    expected = tf.keras.Model(expected_model.input, pooled)(x, training=False).numpy()
    assert_close_to_scale(features, expected)


def test_reben_head_rows_are_mapped_by_name(tmp_path, fixture_tensors):
    """reBEN's head lists the 19 classes alphabetically; each row lands on its class."""
    alphabetical = sorted(constants.CLASSES_19)
    rows = [constants.CLASSES_19.index(name) for name in alphabetical]
    tensors = dict(fixture_tensors)
    tensors["fc.weight"] = fixture_tensors["fc.weight"][rows]
    tensors["fc.bias"] = fixture_tensors["fc.bias"][rows]
    save_file(tensors, str(tmp_path / "reben.safetensors"))
    assert run_import(tmp_path / "reben.safetensors", tmp_path / "w", "--source", "reben") == 0
    record = weights_record.read(tmp_path / "w")
    assert record.bands == constants.BAND_CONFIGS["all"]  # 12 reBEN channels: S1 + S2-10
    assert record.mean[:2] == (sources.REBEN_MEAN["VV"], sources.REBEN_MEAN["VH"])
    logits = imported_logits(tmp_path / "w", reference_inputs())
    assert_close_to_scale(logits, FACTS["logits"])
    inputs = record.model_inputs()
    assert inputs.classes == constants.CLASSES_19
    # S1 in the shards' codes: (dB - offset) / scale, so the model sees the source's values.
    scale, offset = inputs.channel_scale[0], inputs.channel_offset[0]
    assert inputs.mean[0] * scale + offset == pytest.approx(sources.REBEN_MEAN["VV"], abs=1e-9)
    assert inputs.std[0] * scale == pytest.approx(sources.REBEN_STD["VV"])


def test_missing_bands_get_the_mean_filter(tmp_path, fixture_tensors):
    """reBEN's 10 S2 bands serving the 12-band configuration: B01 and B09 are added."""
    tensors = dict(fixture_tensors)
    s2 = list(constants.BANDS)
    keep = [s2.index(b) for b in constants.S2_10_BANDS]
    tensors["conv1.weight"] = fixture_tensors["conv1.weight"][:, keep]
    save_file(tensors, str(tmp_path / "s2-10.safetensors"))
    flags = ("--source", "reben", "--bands", "s2", "--no-head")
    assert run_import(tmp_path / "s2-10.safetensors", tmp_path / "w", *flags) == 0
    record = weights_record.read(tmp_path / "w")
    model = narrow_model(12, None)
    model.load_weights(str(tmp_path / "w" / weights_record.WEIGHTS_FILE), by_name=True)
    kernel = model.get_layer("conv1_conv").get_weights()[0]  # (7, 7, in, out)
    source = tensors["conv1.weight"].transpose(2, 3, 1, 0)
    scale = 10 / 12
    np.testing.assert_allclose(kernel[:, :, s2.index("B02")], scale * source[:, :, 0], rtol=1e-6)
    np.testing.assert_allclose(kernel[:, :, 0], scale * source.mean(axis=2), rtol=1e-5)
    assert record.mean[0] == sources.REBEN_MEAN["B01"]  # reBEN published all 12 bands' statistics
    assert any("B01, B09" in note for note in record.adaptations)


@pytest.mark.parametrize(
    ("change", "flags", "message"),
    [
        ("drop_block", (), "not a ResNet-18 or ResNet-50"),
        ("head_10", (), "not 19 or 43; `bigearthnet-weights import --no-head`"),
        ("stem_7", (), "takes 7 channels; timm weights take"),
        ("extra_tensor", (), "tensors the ResNet layout does not have: layer1.0.se.weight"),
        ("none", ("--source", "ssl4eo", "--bands", "s1"), "cannot serve --bands s1"),
    ],
)
def test_mismatches_are_refused(tmp_path, fixture_tensors, reported_errors, change, flags, message):
    tensors = dict(fixture_tensors)
    if change == "drop_block":
        tensors = {k: v for k, v in tensors.items() if not k.startswith("layer4.2.")}
    elif change == "head_10":
        tensors["fc.weight"], tensors["fc.bias"] = (
            tensors["fc.weight"][:10],
            tensors["fc.bias"][:10],
        )
    elif change == "stem_7":
        tensors["conv1.weight"] = tensors["conv1.weight"][:, :7].copy()
    elif change == "extra_tensor":
        tensors["layer1.0.se.weight"] = np.ones(4, np.float32)
    elif change == "none":
        stem = tensors["conv1.weight"]
        tensors["conv1.weight"] = np.concatenate([stem, stem[:, :1]], axis=1)  # 13 bands
    src = tmp_path / "bad.safetensors"
    save_file(tensors, str(src))
    assert run_import(src, tmp_path / "w", *flags) == 2
    lines = reported_errors()
    assert len(lines) == 1 and str(src) in lines[0] and message in lines[0], lines
    assert not (tmp_path / "w").exists() and not list(tmp_path.glob(".w*"))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("damaged.safetensors", "not a readable safetensors file"),
        ("weights.npz", "unknown weights file type '.npz'"),
    ],  # fmt: skip
)
def test_unreadable_files_are_one_line(tmp_path, reported_errors, name, message):
    src = tmp_path / name
    src.write_bytes(FIXTURE.with_suffix(".safetensors").read_bytes()[:5000])  # truncated
    assert run_import(src, tmp_path / "w") == 2
    lines = reported_errors()
    assert len(lines) == 1 and message in lines[0] and str(src) in lines[0], lines


def test_out_may_not_replace_the_source(tmp_path, reported_errors):
    src = tmp_path / "keep" / "w.safetensors"
    src.parent.mkdir()
    src.write_bytes(FIXTURE.with_suffix(".safetensors").read_bytes())
    assert run_import(src, tmp_path / "keep", "--overwrite") == 2
    assert "would overwrite SRC" in reported_errors()[0]
    assert src.is_file()


def test_pth_without_pytorch_names_the_extra(tmp_path):
    """Where PyTorch is not installed, a .pth file is one line that says what to install."""
    pth = tmp_path / "resnet.pth"
    pth.write_bytes(b"not read")
    code = (
        "import sys; sys.modules['torch'] = None; from bigearthnet.cli.weights import main; "
        f"sys.exit(main(['import', {str(pth)!r}, '--out', {str(tmp_path / 'w')!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs PyTorch: pip install 'bigearthnet-hpc[torch]'" in lines[0]


def test_a_narrow_network_makes_no_run(tmp_path, reported_errors):
    """A run must rebuild from the registry: a ResNet of other widths is refused."""
    assert (
        main(["run", str(FIXTURE.with_suffix(".safetensors")), "--out", str(tmp_path / "r")]) == 2
    )
    assert "the registry's resnet50 has 64 and [64, 128, 256, 512]" in reported_errors()[0]
    assert not (tmp_path / "r").exists()


def _load_converted(model, tensors: dict[str, np.ndarray]) -> None:
    """The fixture's tensors set into ``model`` by the converter, without adaptation."""
    layout = convert.layout_of(tensors, "fixture")
    layers = convert.keras_weights(tensors, layout, tensors["conv1.weight"], "fixture")
    layers["logits"] = convert.head_rows(tensors, None, constants.CLASSES_19)
    for name, weights in layers.items():
        model.get_layer(name).set_weights(weights)


@pytest.mark.bad_input
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_tensors_import_as_float32(
    fixture_tensors, tmp_path, dtype, bad_input_row
) -> None:
    """P13: a bfloat16 .safetensors file gave a traceback. Its tensors widen exactly to
    float32: the import equals that of the same values stored as float32."""
    import ml_dtypes

    low = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)
    cast = {k: v.astype(low) if v.dtype == np.float32 else v for k, v in fixture_tensors.items()}
    save_file(cast, str(tmp_path / f"{dtype}.safetensors"))
    widened = {k: v.astype(np.float32) if v.dtype == low else v for k, v in cast.items()}
    save_file(widened, str(tmp_path / "float32.safetensors"))
    code = run_import(tmp_path / f"{dtype}.safetensors", tmp_path / "low")
    assert code == 0
    assert run_import(tmp_path / "float32.safetensors", tmp_path / "wide") == 0
    x = reference_inputs()
    np.testing.assert_array_equal(imported_logits(tmp_path / "low", x),
                                  imported_logits(tmp_path / "wide", x))  # fmt: skip
    bad_input_row(f"a {dtype} .safetensors file", "bigearthnet-weights import", code,
                  "read as float32 (exactly), no traceback")  # fmt: skip


@pytest.mark.bad_input
@pytest.mark.parametrize("query, key", [("encoder_q", "encoder_k"),
                                        ("base_encoder", "momentum_encoder")])  # fmt: skip
def test_a_moco_checkpoint_gives_its_query_encoder(
    tmp_path, fixture_tensors, query, key, capsys, bad_input_row
) -> None:
    """P15: MoCo keeps two encoders; the momentum copy sorts first by name and was taken."""
    rng = np.random.default_rng(3)
    tensors = {f"module.{query}.{k}": v for k, v in fixture_tensors.items()}
    tensors |= {f"module.{key}.{k}": rng.standard_normal(v.shape).astype(v.dtype)
                for k, v in fixture_tensors.items() if v.dtype == np.float32}  # fmt: skip
    save_file(tensors, str(tmp_path / "moco.safetensors"))
    code = run_import(tmp_path / "moco.safetensors", tmp_path / "w")
    assert code == 0
    assert_close_to_scale(imported_logits(tmp_path / "w", reference_inputs()), FACTS["logits"])
    assert f"took the key prefix 'module.{query}.' off" in capsys.readouterr().err
    bad_input_row(f"a MoCo checkpoint ({query} beside {key})", "bigearthnet-weights import",
                  code, f"the {query} weights, the {key} copy dropped and named")  # fmt: skip


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _import_over_user_files(tmp_path: Path, src: Path, flag: str) -> int:
    """``import --out`` a folder of the user's notes with ``flag``; the exit code, the
    folder checked untouched."""
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    code = run_import(src, mine, flag)
    assert _tree(mine) == {"notes.txt": b"mine\n"}
    return code


@pytest.mark.bad_input
def test_overwrite_replaces_only_a_folder_this_command_made(
    tmp_path, trained_run, reported_errors, bad_input_row
):
    """--force (now --overwrite) replaced any non-empty --out (issue #46: every command that
    writes a folder refuses foreign content); and the import removed the old folder before
    renaming the new one in, so a crash between left none (issue #48: now the old one is
    renamed aside)."""
    src = FIXTURE.with_suffix(".safetensors")
    code = _import_over_user_files(tmp_path, src, "--overwrite")
    assert code == 2
    assert "--out holds other files (notes.txt) and is no folder of bigearthnet-weights import" in (
        reported_errors()[-1])  # fmt: skip
    run = tmp_path / "run"  # a run train.py made: never a `weights run` folder to replace
    shutil.copytree(trained_run, run)
    before = _tree(run)
    assert main(["run", str(src), "--out", str(run), "--overwrite"]) == 2
    assert _tree(run) == before and "is no folder of bigearthnet-weights run" in (
        reported_errors()[-1])  # fmt: skip
    weights = tmp_path / "weights"
    assert run_import(src, weights) == 0
    assert run_import(src, weights, "--no-head") == 2
    assert "exists and is not empty (--overwrite replaces it)" in reported_errors()[-1]
    assert run_import(src, weights, "--no-head", "--overwrite") == 0
    assert not weights_record.read(weights).has_head
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "run", "weights"]
    bad_input_row("--out a folder of other files, or a train.py run; --overwrite",
                  "bigearthnet-weights import, run --overwrite", code,
                  "refused naming what it holds; --overwrite replaces only its own "
                  "folder")  # fmt: skip


@pytest.mark.bad_input
def test_the_old_force_flag_still_replaces_only_its_own_folder(
    tmp_path, capsys, reported_errors, bad_input_row
):
    """--force, the old name of --overwrite (issue #48: one name for "replace"), is taken
    as --overwrite with one warning line: a job script written before still runs, and
    still never replaces a folder of anything else."""
    src = FIXTURE.with_suffix(".safetensors")
    weights = tmp_path / "weights"
    assert run_import(src, weights) == 0
    assert run_import(src, weights, "--no-head", "--force") == 0
    assert not weights_record.read(weights).has_head
    warned = [line for line in capsys.readouterr().err.splitlines() if "deprecated" in line]
    assert warned == ["bigearthnet-weights import: warning: --force is deprecated; use "
                      "--overwrite"]  # fmt: skip
    code = _import_over_user_files(tmp_path, src, "--force")
    assert code == 2
    assert "is no folder of bigearthnet-weights import (--overwrite replaces only" in (
        reported_errors()[-1])  # fmt: skip
    bad_input_row("--force (the old name of --overwrite) on a folder of other files",
                  "bigearthnet-weights import --force", code,
                  "a warning naming --overwrite, then refused as --overwrite is; nothing "
                  "touched")  # fmt: skip


@pytest.mark.bad_input
def test_an_empty_out_is_refused_when_parsed(tmp_path, reported_errors, bad_input_row):
    code = main(["import", str(FIXTURE.with_suffix(".safetensors")), "--out", ""])
    assert code == 2
    assert "argument --out: an empty path names the working directory" in reported_errors()[-1]
    bad_input_row('--out ""', "bigearthnet-weights import", code, "refused when parsed")
