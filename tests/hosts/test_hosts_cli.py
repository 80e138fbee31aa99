"""The hosts of a launch from the command line and from the config file: ``nbaccel launch
--hosts node1,node2 script.py`` run on the bed's login machine, and ``notebook_launcher`` in a
kernel there taking ``hosts`` (and ``hosts_python``) from the config file in force.

The bed's machines are network namespaces of one machine: they share its filesystem, so a
file written on the login machine is there on node1 and node2 too. To show that the script's
text travels with the launch (a script only on the login machine runs everywhere), the hosts'
interpreter (``--hosts_python``, a wrapper) removes the script from the disk as the agents
start, before any rank runs it. The wrapper also puts this checkout first on the agents'
``PYTHONPATH``: ssh passes no variables on, and the hosts must run the nbaccel under test.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from tests.hosts.bed import HostBed
from tests.hosts.login_kernel import LoginKernel, agents_left_after
from tests.support.paths import REPO, pythonpath

SCRIPT = textwrap.dedent(
    """
    import os, socket, sys
    from nbaccel import Accelerator

    if __name__ == "__main__":
        accelerator = Accelerator()
        print(
            f"hello from {socket.gethostname()} as {accelerator.process_index} of "
            f"{accelerator.num_processes}, {accelerator.mixed_precision}, argv={sys.argv[1:]}, "
            f"on disk={os.path.exists(__file__)}",
            flush=True,
        )
        accelerator.wait_for_everyone()
        if sys.argv[1:] == ["fail"] and accelerator.process_index == 1:
            sys.exit(3)
    """
)


def _interpreter(folder: Path, remove: Path | None = None) -> Path:
    """An interpreter for the hosts: this checkout's nbaccel, and ``remove`` gone first."""
    wrapper = folder / "hosts-python"
    first = f"rm -f '{remove}'\n" if remove is not None else ""
    wrapper.write_text(f"#!/bin/sh\n{first}PYTHONPATH='{REPO}' exec '{sys.executable}' \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_nbaccel_launch_runs_a_script_on_every_host(host_bed: HostBed, tmp_path: Path) -> None:
    script = tmp_path / "only_here.py"
    python = _interpreter(tmp_path, remove=script)
    env = host_bed.env(PYTHONPATH=pythonpath(), NBACCEL_CONFIG_FILE=str(tmp_path / "none.yaml"))
    command = [
        sys.executable, "-m", "nbaccel", "launch", "--hosts", "node1,node2",
        "--num_processes", "1", "--hosts_python", str(python), "--mixed_precision", "bf16",
    ]  # fmt: skip
    script.write_text(SCRIPT)
    done = host_bed.run(
        "login", [*command, str(script), "a b", "c"], timeout=180, cwd=tmp_path, env=env
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "nbaccel launch: 1 process(es) x 2 host(s) (node1, node2)" in out, out
    for rank, node in ((0, "node1"), (1, "node2")):
        line = f"[{node} rank{rank}]: hello from {node} as {rank} of 2, bf16, argv=['a b', 'c']"
        assert f"{line}, on disk=False\n" in out, out  # the text travelled, not the file
    assert not script.exists()
    assert agents_left_after(15) == []

    script.write_text(SCRIPT)  # a rank's exit code is the command's; the others are stopped
    failed = host_bed.run(
        "login", [*command, str(script), "fail"], timeout=180, cwd=tmp_path, env=env
    )
    out = failed.stdout + failed.stderr
    assert failed.returncode == 3, out
    assert "nbaccel launch: rank 1 on node2 exited with code 3" in out, out
    assert agents_left_after(15) == []


def test_notebook_launcher_takes_the_hosts_of_the_config_file(
    host_bed: HostBed, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"hosts: [node1, node2]\nhosts_python: {_interpreter(tmp_path)}\n")
    kernel = LoginKernel(
        host_bed, tmp_path, PYTHONPATH=pythonpath(), NBACCEL_CONFIG_FILE=str(config)
    )
    try:
        out = kernel.ok(
            """
import socket
from nbaccel import notebook_launcher

print("FILE", notebook_launcher(socket.gethostname, num_processes=1))
print("HERE", notebook_launcher(socket.gethostname, num_processes=1, hosts=False))
try:
    notebook_launcher(socket.gethostname, num_processes=1, num_nodes=2)
except ValueError as exc:
    print("REFUSED", exc)
""",
        )
    finally:
        kernel.stop()
    assert "FILE ['node1', 'node2']" in out, out
    assert "Launching 2 processes on 2 machines (node1, node2; 1 each) over ssh" in out, out
    assert "HERE ['login']" in out, out
    assert "REFUSED hosts starts every machine from this notebook, so num_nodes and node_rank" in (
        out
    ), out
    assert agents_left_after(15) == []
