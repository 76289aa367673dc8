"""bigearthnet.scaling.hosts and jobs/elastic/discover_hosts.sh: local entries as Horovod's
discovery sees them, one controller per hosts folder, and a discovery that says at once
why it finds no host."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import DISCOVER, hold_run_folder

from bigearthnet.scaling import hosts
from bigearthnet.scaling.hosts import ControlError, LocalSlots


def discover(folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ELASTIC_HOSTS_DIR": str(folder), "TMPDIR": str(folder.parent)}
    return subprocess.run(["bash", str(DISCOVER)], capture_output=True, text=True, env=env)


def test_local_entries_grow_and_shrink_what_discovery_reports(tmp_path: Path) -> None:
    (tmp_path / "base.hosts").write_text("localhost:2\n")  # what the run started on
    local = LocalSlots(tmp_path, slots=1)
    assert local.resize_to(4) == "2 slots: wrote local-001.hosts, local-002.hosts"
    assert hosts.discovered(tmp_path) == {"localhost": 4}
    assert (tmp_path / "local-002.hosts").read_text() == "localhost:1\n"
    assert local.resize_to(4) == "4 slots: nothing to do"
    assert local.resize_to(3) == "4 slots: removed local-002.hosts"  # the newest first
    assert local.resize_to(1) == "3 slots: removed local-001.hosts"
    # What it did not write stays: the run's own slots are not the controller's to take.
    assert local.resize_to(1) == "2 slots: removed (none of ours left)"
    assert sorted(p.name for p in tmp_path.glob("*.hosts")) == ["base.hosts"]


def test_local_entries_count_on_after_a_restart(tmp_path: Path) -> None:
    LocalSlots(tmp_path, slots=2).grow(2)
    again = LocalSlots(tmp_path, slots=2)  # a new controller on the same folder
    assert again.grow(1) == ["local-003.hosts"]
    assert [p.name for p in again.entries()] == [f"local-00{i}.hosts" for i in (1, 2, 3)]
    assert hosts.discovered(tmp_path) == {"localhost": 6}


def test_a_missing_hosts_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ControlError, match="hosts folder does not exist"):
        LocalSlots(tmp_path / "nowhere", slots=1)


def test_one_controller_per_hosts_folder(tmp_path: Path) -> None:
    other = hold_run_folder(tmp_path)  # another process claimed the folder
    try:
        with pytest.raises(ControlError, match="another bigearthnet-elastic .* follows"):
            hosts.claim(tmp_path)
    finally:
        other.kill()
        other.wait()


def test_discovery_names_files_that_are_not_hosts_files_once(tmp_path: Path) -> None:
    folder = tmp_path / "hosts"
    folder.mkdir()
    (folder / "workers").write_text("localhost:2\n")  # a typo: not *.hosts
    first = discover(folder)
    assert (first.returncode, first.stdout) == (0, "")
    assert first.stderr.strip() == (
        f"discover_hosts: no *.hosts file in {folder} (it holds: workers): only files "
        "named *.hosts are read"
    )
    assert discover(folder).stderr == ""  # Horovod asks every second: said once
    (folder / "workers").unlink()
    empty = discover(folder)  # the folder changed: said again
    assert "no *.hosts file" in empty.stderr and "yet" in empty.stderr
    (folder / "workers.hosts").write_text("localhost:2\n")
    found = discover(folder)
    assert (found.stdout, found.stderr) == ("localhost:2\n", "")
