"""Shared fixtures: the real samples, small synthetic archives, their shards, a trained run.

Everything expensive is session-scoped and built once by the project's own commands
(``bigearthnet-synth``, ``bigearthnet-preprocess``, ``train.py``), in-process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import REPO, TINY_RECIPE, horovodrun, preprocess, train_argv, unavailable  # noqa: F401

import bigearthnet  # noqa: F401  (selects Keras 2 before any test module imports TensorFlow)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def _shared_dir() -> Path:
    return Path(os.environ.get("SHARED_DIR", REPO.parent / "shared")).resolve()


@pytest.fixture
def rank_log(caplog):
    """caplog that sees the ranks' log lines: their logger writes to the stderr of the test
    that first set it up and need not propagate, so capsys and plain caplog can miss them."""
    logger = logging.getLogger("bigearthnet")
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


@pytest.fixture
def reported_errors(capsys, rank_log):
    """A callable giving the error lines a command reported: through the ranks' logger once
    some test has set it up, else printed on stderr (``cli.common.report``'s two ways)."""

    def lines() -> list[str]:
        # A record can reach caplog twice: by rank_log's handler and by propagation.
        records = {id(r): r for r in rank_log.records if r.levelno >= logging.ERROR}
        logged = [r.getMessage() for r in records.values()]
        printed = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        return logged or printed

    return lines


@pytest.fixture(scope="session", autouse=True)
def onnx_cache(tmp_path_factory) -> Path:
    """The session's own cache of converted pixel models (bigearthnet/inference/
    onnx_pixels.py): no test writes to the home folder, none reuses another run's."""
    folder = tmp_path_factory.mktemp("cache")
    os.environ["BIGEARTHNET_CACHE"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = _shared_dir()
    if not (path / "samples" / "bigearthnet-v1").is_dir():
        pytest.fail(f"{path}/samples/bigearthnet-v1 missing: set SHARED_DIR to the shared folder")
    return path


@pytest.fixture(scope="session")
def real_v1(shared_dir: Path) -> Path:
    """The 11 real BigEarthNet v1 patches (read-only; copy before changing anything)."""
    return shared_dir / "samples" / "bigearthnet-v1"


@pytest.fixture(scope="session")
def synth_v1(tmp_path_factory) -> Path:
    """A learnable synthetic v1 archive of 240 patches."""
    from bigearthnet.synthetic.archive import ArchiveSpec, generate_archive

    out = tmp_path_factory.mktemp("synth") / "v1"
    generate_archive(out, ArchiveSpec(240, layout="v1", seed=7, difficulty="simple"))
    return out


@pytest.fixture(scope="session")
def synth_v2(tmp_path_factory) -> Path:
    """A synthetic v2 archive (tiles + metadata.parquet + snow/cloud table) of 60 patches."""
    from bigearthnet.synthetic.archive import ArchiveSpec, generate_archive

    out = tmp_path_factory.mktemp("synth") / "v2"
    generate_archive(out, ArchiveSpec(60, layout="v2", seed=3, difficulty="simple"))
    return out


@pytest.fixture(scope="session")
def shards_v1(synth_v1: Path, tmp_path_factory) -> Path:
    """``synth_v1`` preprocessed into shards of 32 patches (train 144, val 48, test 48)."""
    out = tmp_path_factory.mktemp("shards") / "v1"
    assert preprocess(synth_v1, out, "--shard-size", "32") == 0
    return out


@pytest.fixture(scope="session")
def shards_v2(synth_v2: Path, tmp_path_factory) -> Path:
    """``synth_v2`` preprocessed: 19-class labels and reference maps (train 34, val 11, test
    11; one shard per split)."""
    out = tmp_path_factory.mktemp("shards") / "v2"
    assert preprocess(synth_v2, out) == 0
    return out


@pytest.fixture(scope="session")
def trained_run(shards_v1: Path, tmp_path_factory) -> Path:
    """A tiny model trained 6 epochs on ``shards_v1`` (single process, no test evaluation)."""
    import train

    run = tmp_path_factory.mktemp("runs") / "tiny"
    assert train.main(train_argv(shards_v1, run, 6)) == 0
    return run


# ResNet-50 trained a few steps: the precise-BN test's recipe (Adam at 1e-3: at 1e-2 the run
# diverged once the archive's landscape changed; tests/training/test_precise_bn.py).
RESNET50_RECIPE = [
    *("--model", "resnet50", "--optimizer", "adam", "--lr", "0.001", "--batch-size", "16"),
    *("--epochs", "1", "--max-steps-per-epoch", "10", "--warmup-epochs", "0", "--threads", "2"),
    *("--no-progress", "--no-eval-test"),
]


@pytest.fixture(scope="session")
def resnet50_run(shards_v1: Path, tmp_path_factory) -> Callable[[int], Path]:
    """ResNet-50 runs of :data:`RESNET50_RECIPE` on ``shards_v1`` by their
    ``--precise-bn-samples``, each trained when a test first asks for it (~40 s): the tests
    that share them are in the xdist group "export". Tests that write into a run copy it."""
    import train

    root = tmp_path_factory.mktemp("resnet50")
    made: dict[int, Path] = {}

    def run(samples: int) -> Path:
        if samples not in made:
            path = root / f"precise-bn-{samples}"
            argv = ["--data", str(shards_v1), "--run-dir", str(path), *RESNET50_RECIPE]
            assert train.main([*argv, "--precise-bn-samples", str(samples)]) == 0
            made[samples] = path
        return made[samples]

    return run


@pytest.fixture(scope="session")
def trained_head_run(shards_v2: Path, tmp_path_factory) -> Path:
    """A tiny model with the dense head trained 4 epochs on ``shards_v2`` (their maps turn
    the head on by default; single process, no test evaluation): every test of a model
    with two outputs shares it."""
    import train

    run = tmp_path_factory.mktemp("runs") / "tiny-dense"
    assert train.main(train_argv(shards_v2, run, 4)) == 0
    return run


@pytest.fixture(scope="session")
def head_eval(trained_head_run: Path, tmp_path_factory) -> Path:
    """``trained_head_run`` evaluated on test (``--out``: the run folder stays as trained):
    its pixel figures against the reference maps and the truth. Every test of the dense
    head's evaluation, and of its export, shares it."""
    import evaluate

    out = tmp_path_factory.mktemp("eval") / "head-test"
    assert evaluate.main(["--run-dir", str(trained_head_run), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def fine_region(tmp_path_factory) -> Path:
    """A synthetic region of 2 tiles of 2.4 km x 5 dates, parcels of 1.2 km, with its truth:
    scene maps made from the truth (``synthetic.region_maps``) feed a region series at any
    cell without a model (the products, their blocks, the page at 10 m)."""
    from bigearthnet.synthetic.region import RegionSpec, generate_region

    out = tmp_path_factory.mktemp("fine-region") / "synth"
    generate_region(out, RegionSpec(tiles=2, dates=5, size=240, block=1200.0, seed=3))
    return out


@pytest.fixture(scope="session")
def simple_region(tmp_path_factory) -> Path:
    """A synthetic region of 2 tiles of 2.4 km x 5 dates, a land-cover block a tile, the
    simple look the tiny test model maps: the region command's bad inputs."""
    from bigearthnet.synthetic.region import RegionSpec, generate_region

    out = tmp_path_factory.mktemp("simple-region") / "synth"
    spec = RegionSpec(tiles=2, dates=5, size=240, block=2400.0, seed=3, difficulty="simple")
    generate_region(out, spec)
    return out


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs to fill up (disk-full faults); skipped where mounting is not allowed.
    ``small_disk.fill()`` leaves 64 KB: room for a history row, not for a checkpoint."""
    import shutil
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    mounted = (
        os.geteuid() == 0
        and not subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
        ).returncode
    )
    if not mounted:
        unavailable("tmpfs", "needs root and tmpfs mounts")

    class SmallDisk:
        path = mount

        @staticmethod
        def fill() -> Path:
            filler = mount / "filler"
            filler.write_bytes(bytes(max(shutil.disk_usage(mount).free - 64 * 1024, 0)))
            return filler

    try:
        yield SmallDisk
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


# ----------------------------------------------------------------- the fault table
# Tests marked `fault` inject one fault into real runs and record a row; `make faults` runs
# them and prints the table (README, "Reliability"); BEN_FAULTS_TABLE=PATH also writes it.
# A row travels as a user property of the test's report, so that the process printing the
# table sees it also when pytest-xdist ran the test in a worker; a failed test adds none.
FAULT_ROW, BAD_INPUT_ROW = "fault_row", "bad_input_row"
FAULT_ROWS: list[dict] = []


@pytest.fixture
def fault_row(request):
    """``fault_row(fault, survived=..., data_lost=..., detect_s=..., runs=1)``: this test's
    row of the fault table (recorded when the test reaches it: after its checks)."""

    def record(fault: str, *, data_lost: str, detect_s: float | None, runs: int = 1) -> None:
        request.node.user_properties.append(
            (FAULT_ROW, {
                "fault": fault,
                "runs": runs,
                "survived": "yes",
                "data_lost": data_lost,
                "detect_s": detect_s,
                "test": request.node.nodeid.split("::")[-1],
            })
        )  # fmt: skip

    return record


def cell(value: object) -> str:
    """A Markdown table cell: a ``|`` in the text (``import | run``) would end the cell."""
    return str(value).replace("|", "\\|")


def fault_table(rows: list[dict]) -> str:
    lines = [
        "| fault | runs | survived | data lost | time to detect | test |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        detect = "-" if row["detect_s"] is None else f"{row['detect_s']:.1f} s"
        lines.append(
            f"| {cell(row['fault'])} | {row['runs']} | {row['survived']} "
            f"| {cell(row['data_lost'])} | {detect} | `{cell(row['test'])}` |"
        )
    return "\n".join(lines)


# Tests marked `bad_input` give one command one bad input each and record a row of the
# bad-input table (`make bad-input`; docs/reliability.md); BEN_BAD_INPUT_TABLE=PATH writes it.
BAD_INPUT_ROWS: list[dict] = []


@pytest.fixture
def bad_input_row(request):
    """``bad_input_row(bad_input, command, exit_code, verdict)``: this test's row of the
    bad-input table (recorded once the test's checks have passed)."""
    test = request.node.nodeid.split("::")[-1]
    return lambda bad_input, command, exit_code, verdict: request.node.user_properties.append(
        (BAD_INPUT_ROW, {
            "input": bad_input,
            "command": command,
            "exit": exit_code,
            "verdict": verdict,
            "test": test,
        })
    )  # fmt: skip


def bad_input_table(rows: list[dict]) -> str:
    lines = [
        "| bad input | command | exit | verdict | test |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {cell(row['input'])} | `{cell(row['command'])}` | {row['exit']} "
            f"| {cell(row['verdict'])} | `{cell(row['test'])}` |"
        )
    return "\n".join(lines + [f"\n{len(rows)} bad inputs, every one handled as promised."])


# The tiers, by marker (the Makefile's selections): what passed in each is counted, so that a
# run of several tiers (CI's `make test-heavy`) still proves that each of them ran.
TIERS = ("bad_input", "fault", "reference", "slow")
PASSED_BY_TIER: dict[str, int] = {}


def pytest_configure(config) -> None:
    """pytest-xdist registers its xdist_group marker only when it is loaded: without this,
    ``-p no:xdist`` (the Makefile's WORKERS=0) failed --strict-markers on every module that
    holds a group (tests/slurm, the scene and region maps, export...)."""
    config.addinivalue_line("markers", "xdist_group(name): run in one pytest-xdist worker")


def tier_of(keywords) -> str:
    return next((tier for tier in TIERS if tier in keywords), "fast")


def pytest_runtest_logreport(report) -> None:
    if report.when != "call" or not report.passed:
        return
    tier = tier_of(report.keywords)
    PASSED_BY_TIER[tier] = PASSED_BY_TIER.get(tier, 0) + 1
    for name, row in report.user_properties:
        {FAULT_ROW: FAULT_ROWS, BAD_INPUT_ROW: BAD_INPUT_ROWS}.get(name, []).append(row)


def tier_floors(text: str) -> dict[str, int]:
    """BEN_MIN_TESTS: ``fast:498,slow:36``, a tier's least count of passed tests."""
    floors = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        tier, _, count = part.partition(":")
        if tier not in (*TIERS, "fast") or not count.isdigit():
            raise pytest.UsageError(f"BEN_MIN_TESTS: '{part}' is not TIER:COUNT")
        floors[tier] = int(count)
    return floors


def pytest_sessionfinish(session, exitstatus) -> None:
    """A tier proves that it ran: BEN_MIN_TESTS (CI sets each tier's count) fails a run in
    which fewer tests of a tier passed, e.g. one whose selection lost a file or a marker."""
    if hasattr(session.config, "workerinput"):  # an xdist worker sees only its part
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    counts = ", ".join(f"{tier} {n}" for tier, n in sorted(PASSED_BY_TIER.items()))
    reporter.write_line("")
    reporter.write_line(f"passed by tier: {counts or 'none'}")
    for tier, floor in tier_floors(os.environ.get("BEN_MIN_TESTS", "")).items():
        if PASSED_BY_TIER.get(tier, 0) < floor:
            reporter.write_line(
                f"BEN_MIN_TESTS: {PASSED_BY_TIER.get(tier, 0)} {tier} tests passed, "
                f"fewer than {floor}",
                red=True,
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    for rows, title, variable, render in (
        (FAULT_ROWS, "fault table", "BEN_FAULTS_TABLE", fault_table),
        (BAD_INPUT_ROWS, "bad-input table", "BEN_BAD_INPUT_TABLE", bad_input_table),
    ):
        if not rows:
            continue
        table = render(rows)
        terminalreporter.write_sep("=", title)
        terminalreporter.write_line(table)
        if os.environ.get(variable):
            Path(os.environ[variable]).write_text(table + "\n")
