"""Input errors come before TensorFlow starts (5 s on every rank): a mistyped folder, a
checkpoint that is not there, an output that cannot be written are refused in one line,
exit 2, with no TensorFlow, Keras or Horovod module loaded - train.py, evaluate.py,
bigearthnet-export and every bigearthnet-map command. One process asks them all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import REPO

PROBE = """
import contextlib, importlib, io, json, sys
for module, argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = importlib.import_module(module).main(argv)
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "horovod", "keras"))
    print(json.dumps({"argv": argv, "exit": code, "stderr": err.getvalue(), "heavy": heavy}))
"""
SCENE = "S2A_MSIL2A_20200601T101031_N0214_R022_T32TNS_20200601T120000.SAFE"


def cases(run: Path, shards: Path, tmp: Path) -> list[tuple[str, list[str], str]]:
    """(module, argv, what the one line says) for each bad input."""
    nowhere, out = str(tmp / "nowhere"), str(tmp / "out")
    (tmp / SCENE).mkdir()
    run_dir = ["--run-dir", str(run)]
    return [
        ("train", ["--data", nowhere, "--run-dir", out], "data folder does not exist"),
        ("train", ["--data", str(shards), "--run-dir", str(shards)], "a shards folder"),
        ("evaluate", [*run_dir, "--checkpoint", "nosuch"], "not a checkpoint"),
        ("evaluate", [*run_dir, "--data", nowhere], "data folder does not exist"),
        ("bigearthnet.cli.export", [str(run), "--out", f"{nowhere}/e"], "its parent folder"),
        ("bigearthnet.cli.map", ["scene", f"{nowhere}.SAFE", "--out", f"{out}.tif", *run_dir],
         "no such scene"),
        ("bigearthnet.cli.map", ["scene", str(tmp), "--out", f"{out}.tif", "--model", str(run)],
         "export.json: missing"),
        ("bigearthnet.cli.map", ["--shards", nowhere, "--out", out, *run_dir],
         "data folder does not exist"),
        ("bigearthnet.cli.map", ["region", str(tmp / SCENE), "--out", out, "--run-dir", nowhere],
         "run folder does not exist"),
    ]  # fmt: skip


def test_input_errors_come_before_tensorflow(trained_run, shards_v1, tmp_path) -> None:
    runs = cases(trained_run, shards_v1, tmp_path)
    probe = json.dumps([(module, argv) for module, argv, _ in runs])
    done = subprocess.run([sys.executable, "-c", PROBE, probe], cwd=REPO, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(answers) == len(runs), done.stdout[-2000:]
    for (_, argv, needle), answer in zip(runs, answers):
        (line,) = answer["stderr"].splitlines()  # one line, no traceback
        assert answer["exit"] == 2 and needle in line, (argv, answer)
        assert answer["heavy"] == [], (argv, line, answer["heavy"])  # first offender named
