"""The hosts bed itself: ssh reaches each node (and only with the right key), SLURM runs jobs
on both nodes, a kernel in an allocation sees the job, and a cut link is noticed in seconds
(by ssh and by SLURM) and restored. test_bed_lifecycle.py: set-up and tear-down."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from tests.hosts.bed import ADDRESSES, NODES, HostBed
from tests.hosts.bed_slurm import SLURMD_TIMEOUT
from tests.hosts.bed_ssh import PORTS, keygen
from tests.hosts.login_kernel import LoginKernel

WHO = "import os, socket; print(socket.gethostname(), *os.environ['SSH_CONNECTION'].split()[2:])"


def ssh(bed: HostBed, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``ssh -F <the bed's config> args...`` from the login machine."""
    return bed.run("login", ["ssh", "-F", str(bed.ssh_config), *args], timeout=timeout)


def who(bed: HostBed, *target: str) -> str:
    """``hostname address port`` of the sshd that ``ssh target`` reached."""
    done = ssh(bed, *target, shlex.join(["python3", "-c", WHO]))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("node", NODES)
def test_ssh_runs_on_the_node(host_bed: HostBed, node: str) -> None:
    assert who(host_bed, node) == f"{node} {ADDRESSES[node]} 22"


def test_home_ssh_config_is_the_login_users(host_bed: HostBed) -> None:
    # no -F: ssh reads ~/.ssh/config of the login machine's root, which is the bed's home
    done = host_bed.run("login", ["ssh", "node2-alt", shlex.join(["python3", "-c", WHO])])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["node2", ADDRESSES["node2"], "2222"]
    home = host_bed.run("login", ["python3", "-c", "import os; print(os.path.expanduser('~'))"])
    assert Path(home.stdout.strip()) == host_bed.home
    assert (host_bed.home / ".ssh").stat().st_mode & 0o777 == 0o700
    for name in ("config", "id_ed25519", "known_hosts"):
        assert (host_bed.home / ".ssh" / name).stat().st_mode & 0o077 == 0, name
    assert "203.0.113." not in Path("/etc/hosts").read_text()  # the root namespace's is untouched


def test_non_default_port(host_bed: HostBed) -> None:
    address = ADDRESSES["node2"]
    assert who(host_bed, "-p", "2222", "node2") == f"node2 {address} 2222"
    assert who(host_bed, "-p", "2222", f"root@{address}") == f"node2 {address} 2222"
    refused = ssh(host_bed, "-p", "2222", "node1", "true")  # node1 has sshd on 22 only
    assert refused.returncode == 255 and "refused" in refused.stderr, refused.stderr


def test_only_the_bed_key_gets_in(host_bed: HostBed, tmp_path: Path) -> None:
    stranger = tmp_path / "id_stranger"
    keygen(stranger, "stranger")

    def login(key: Path, target: str = "root@node1") -> subprocess.CompletedProcess[str]:
        options = [
            *("-F", "/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"),
            *("-o", f"UserKnownHostsFile={host_bed.ssh.known_hosts}"),
            *("-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null"),
        ]
        return host_bed.run("login", ["ssh", *options, "-i", str(key), target, "true"])

    assert login(host_bed.ssh.key).returncode == 0
    for done in (login(stranger), login(host_bed.ssh.key, "nobody@node1")):
        # publickey is the only method the server offers: no passwords
        assert done.returncode == 255, done
        assert "Permission denied (publickey)" in done.stderr, done.stderr


def test_daemons_listen_only_inside_the_bed(host_bed: HostBed) -> None:
    for node in NODES:
        ssh_listeners = {(a, p) for a, p in host_bed.listening(node) if p in (22, 2222)}
        assert ssh_listeners == {(ADDRESSES[node], port) for port in PORTS[node]}
    bed_pids = {str(pid) for pid in host_bed.net.pids()}
    root = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    assert not [line for line in root.splitlines() if any(f"pid={p}," in line for p in bed_pids)]


def test_munge_works_across_namespaces(host_bed: HostBed) -> None:
    socket = str(host_bed.slurm.socket)
    credential = host_bed.run("node2", ["munge", "-n", "-S", socket])
    assert credential.returncode == 0, credential.stderr
    decoded = host_bed.run("node1", ["unmunge", "-S", socket], input=credential.stdout)
    assert decoded.returncode == 0 and "Success" in decoded.stdout, decoded


def test_srun_in_an_allocation_reaches_both_nodes(host_bed: HostBed) -> None:
    job = host_bed.in_allocation(["srun", "-N2", "hostname"], stdout=subprocess.PIPE, text=True)
    out, _ = job.communicate(timeout=60)
    assert job.returncode == 0
    assert sorted(out.split()) == ["node1", "node2"]


def test_a_kernel_in_an_allocation_sees_the_job(host_bed: HostBed, tmp_path: Path) -> None:
    kernel = LoginKernel(host_bed, tmp_path, allocation=2)
    try:
        answer = kernel.run(
            "import json, os, socket, subprocess\n"
            "env = {k: v for k, v in os.environ.items() if k.startswith('SLURM_')}\n"
            "nodes = subprocess.run(['srun', 'hostname'], capture_output=True, text=True).stdout\n"
            "print(json.dumps([socket.gethostname(), env, sorted(nodes.split())]))\n"
        )
        assert answer["status"] == "ok", answer
        host, env, nodes = json.loads(answer["stdout"])
        assert host == "login" and nodes == ["node1", "node2"]
        assert env["SLURM_JOB_NODELIST"] == "node[1-2]" and env["SLURM_JOB_NUM_NODES"] == "2"
        assert env["SLURM_SUBMIT_HOST"] == "login"
        queue = host_bed.run("login", ["squeue", "-h", "-o", "%i %T"]).stdout.split()
        assert queue == [env["SLURM_JOB_ID"], "RUNNING"]
    finally:
        kernel.stop()
    assert host_bed.run("login", ["squeue", "-h", "-t", "running", "-o", "%i"]).stdout == ""


def test_cut_and_restore_a_node(host_bed: HostBed) -> None:
    session = host_bed.popen(
        "login",
        ["ssh", "-F", str(host_bed.ssh_config), "node2", "sleep 120"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1)  # the session is up
    host_bed.cut("node2")
    try:
        start = time.monotonic()
        refused = ssh(host_bed, "node2", "true")
        assert refused.returncode == 255 and time.monotonic() - start < 10, refused
        assert ssh(host_bed, "node1", "true").returncode == 0
        # the open session notices too (ServerAliveInterval 2, ServerAliveCountMax 3)
        assert session.wait(timeout=15) == 255
        # and SLURM marks the node DOWN once SlurmdTimeout has passed without an answer
        deadline = start + SLURMD_TIMEOUT + 15
        while not host_bed.node_state("node2").startswith("down"):
            assert time.monotonic() < deadline, host_bed.node_state("node2")
            time.sleep(0.5)
    finally:
        host_bed.restore("node2")
    assert who(host_bed, "node2") == f"node2 {ADDRESSES['node2']} 22"
    assert host_bed.node_state("node2") == "idle"
