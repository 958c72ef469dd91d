"""Control planes whose ``down`` never ran (a killed test run) leave their etcd data in memory (/dev/shm, ~125 MB
each); the next ``up`` removes every such directory no running process uses, and keeps those in use."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opbroker.devcluster.controlplane import sweep_orphaned_etcd_data


@pytest.mark.process
def test_orphaned_etcd_data_goes_and_data_in_use_stays(tmp_path: Path) -> None:
    uid = os.getuid()
    orphan = tmp_path / f"opbroker-gone-{uid}-etcd"
    used = tmp_path / f"opbroker-alive-{uid}-etcd"
    other_user = tmp_path / f"opbroker-gone-{uid + 1}-etcd"
    unrelated = tmp_path / "something-else"
    for folder in (orphan, used, other_user, unrelated):
        (folder / "member").mkdir(parents=True)
    # A process naming `used` as its data directory, as etcd does on its command line.
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--data-dir={used}"])
    try:
        shown = Path(f"/proc/{holder.pid}/cmdline")
        for _ in range(500):  # until its exec has put the arguments in place (a sweep in between would take it)
            if f"--data-dir={used}".encode() in shown.read_bytes():
                break
            time.sleep(0.01)
        assert sweep_orphaned_etcd_data(tmp_path) == [orphan]
    finally:
        holder.kill()
        holder.wait()
    assert not orphan.exists() and used.exists() and other_user.exists() and unrelated.exists()
    assert sweep_orphaned_etcd_data(tmp_path) == [used]  # its process gone, it is an orphan too


def test_nothing_to_sweep_where_there_is_no_folder(tmp_path: Path) -> None:
    assert sweep_orphaned_etcd_data(tmp_path / "missing") == []
