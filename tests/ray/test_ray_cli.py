"""``nbaccel launch --hosts ray script.py`` run on the Ray bed's head, and ``notebook_launcher``
in a kernel there taking ``hosts: ray`` (with ``num_machines``: the nodes) from the config file
in force. The script's text travels with the launch: it is removed from the disk before any
rank runs it (the machines share one filesystem)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from tests.hosts.login_kernel import LoginKernel, agents_left_after
from tests.ray.bed_ray import RayBed
from tests.support.paths import pythonpath

SCRIPT = textwrap.dedent(
    """
    import os, socket, sys
    from nbaccel import Accelerator

    if __name__ == "__main__":
        accelerator = Accelerator()
        print(
            f"hello from {socket.gethostname()} as {accelerator.process_index} of "
            f"{accelerator.num_processes}, argv={sys.argv[1:]}",
            flush=True,
        )
        accelerator.wait_for_everyone()
        if sys.argv[1:] == ["fail"] and accelerator.process_index == 1:
            sys.exit(3)
    """
)


def test_nbaccel_launch_runs_a_script_on_the_ray_nodes(ray_bed: RayBed, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = ray_bed.env(PYTHONPATH=pythonpath(), NBACCEL_CONFIG_FILE=str(tmp_path / "none.yaml"))
    command = [sys.executable, "-m", "nbaccel", "launch", "--hosts", "ray", "--num_processes", "1"]
    done = ray_bed.run("login", [*command, str(script), "a b"], timeout=180, cwd=tmp_path, env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "the Ray cluster's nodes" in out, out
    for rank, node in ((0, "node1"), (1, "node2")):
        assert f"[{node} rank{rank}]: hello from {node} as {rank} of 2, argv=['a b']\n" in out, out
    failed = ray_bed.run(
        "login", [*command, str(script), "fail"], timeout=180, cwd=tmp_path, env=env
    )
    out = failed.stdout + failed.stderr
    assert failed.returncode == 3, out
    assert "rank 1 on node2 exited with code 3" in out, out
    assert agents_left_after(20) == []


def test_notebook_launcher_takes_hosts_ray_from_the_config_file(
    ray_bed: RayBed, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("hosts: ray\nnum_machines: 2\n")
    kernel = LoginKernel(  # type: ignore[arg-type]  # the bed has popen() and env()
        ray_bed, tmp_path, PYTHONPATH=pythonpath(), NBACCEL_CONFIG_FILE=str(config)
    )
    try:
        out = kernel.ok(
            """
import socket
from nbaccel import notebook_launcher

print("FILE", notebook_launcher(socket.gethostname, num_processes=1))
print("HERE", notebook_launcher(socket.gethostname, num_processes=1, hosts=False))
""",
            timeout=240,
        )
    finally:
        kernel.stop()
    assert "FILE ['node1', 'node2']" in out, out
    assert "Launching 2 processes on 2 machines (node1, node2; 1 each) on the Ray cluster" in out
    assert "HERE ['login']" in out, out
    assert agents_left_after(20) == []
