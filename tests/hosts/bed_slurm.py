"""The bed's SLURM (22.05) and munge files: one munge key and socket, slurm.conf, cgroup.conf.

One munged serves every machine through a unix socket in the bed's directory (a path socket
is reached across network namespaces; an abstract one would not be). slurmctld runs on login,
slurmd on node1 and node2, all as root with their state, spool and logs in the bed's directory;
``SLURM_CONF`` points every daemon and command at the bed's slurm.conf, so /etc/slurm is never
read. No cgroups: proctrack/linuxproc and task/none.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.hosts.bed_net import ADDRESSES, NODES

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
# seconds without an answer before slurmctld marks a node DOWN (a cut link, a lost host)
SLURMD_TIMEOUT = 10


class SlurmFiles:
    def __init__(self, root: Path) -> None:
        self.munge = root / "munge"
        self.socket = self.munge / "munge.socket"
        self.key = self.munge / "munge.key"
        self.dir = root / "slurm"
        self.conf = self.dir / "slurm.conf"
        self.logs = root / "logs"

    def write(self) -> None:
        self.munge.mkdir(mode=0o700)
        subprocess.run(
            ["mungekey", "--create", f"--keyfile={self.key}"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        self.key.chmod(0o600)
        for sub in ("ctld", *NODES):
            (self.dir / sub).mkdir(mode=0o700, parents=True)
        self.conf.write_text(self._conf())
        # slurmd 22.05 always loads a cgroup plugin; naming v1 skips autodetection, which fails
        # because `ip netns exec` mounts a fresh /sys without the cgroup filesystems. Nothing
        # here uses it (proctrack/linuxproc, task/none), so no cgroup is ever made.
        (self.dir / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")

    def _conf(self) -> str:
        nodes = "".join(
            # config_overrides: these numbers stand, whatever this machine has
            f"NodeName={node} NodeAddr={ADDRESSES[node]} CPUs=2 RealMemory=1024 State=UNKNOWN\n"
            for node in NODES
        )
        return (
            "ClusterName=nbh\n"
            f"SlurmctldHost=login({ADDRESSES['login']})\n"
            f"SlurmctldPort={SLURMCTLD_PORT}\n"
            f"SlurmdPort={SLURMD_PORT}\n"
            "SlurmUser=root\n"
            "SlurmdUser=root\n"
            "AuthType=auth/munge\n"
            "CredType=cred/munge\n"
            f"AuthInfo=socket={self.socket}\n"
            f"StateSaveLocation={self.dir / 'ctld'}\n"
            f"SlurmdSpoolDir={self.dir}/%n\n"
            f"SlurmctldPidFile={self.dir / 'ctld' / 'slurmctld.pid'}\n"
            f"SlurmdPidFile={self.dir}/%n/slurmd.pid\n"
            f"SlurmctldLogFile={self.logs / 'slurmctld.log'}\n"
            f"SlurmdLogFile={self.logs}/slurmd-%n.log\n"
            "ProctrackType=proctrack/linuxproc\n"
            "TaskPlugin=task/none\n"
            "MpiDefault=none\n"
            "JobAcctGatherType=jobacct_gather/none\n"
            "AccountingStorageType=accounting_storage/none\n"
            "JobCompType=jobcomp/none\n"
            "SchedulerType=sched/builtin\n"
            "SelectType=select/cons_tres\n"
            "SelectTypeParameters=CR_Core\n"
            "SlurmdParameters=config_overrides\n"
            f"SlurmdTimeout={SLURMD_TIMEOUT}\n"
            "SlurmctldTimeout=10\n"
            "MessageTimeout=4\n"
            # a node back on the network (restored link) takes jobs again by itself
            "ReturnToService=2\n"
            "KillWait=2\n"
            "InactiveLimit=0\n"
            "MailProg=/bin/true\n"
            f"{nodes}"
            "PartitionName=batch Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP\n"
        )

    def munged_argv(self) -> list[str]:
        # --force: munged wants every directory above its socket open to all users; the bed's
        # clients are all root and its directory stays 0700, so that check only warns
        return [
            *("munged", "--foreground", "--force", "--num-threads=2"),
            *(f"--socket={self.socket}", f"--key-file={self.key}"),
            *(f"--pid-file={self.munge / 'munged.pid'}", f"--seed-file={self.munge / 'seed'}"),
        ]

    def log(self, daemon: str) -> Path:
        """Where ``daemon`` ("munged", "slurmctld", "slurmd-node1", "sshd-node2") logs."""
        return self.logs / f"{daemon}.log"


def slurmctld_argv() -> list[str]:
    return ["slurmctld", "-D"]


def slurmd_argv() -> list[str]:
    # the node finds its NodeName from its hostname (see bed_net)
    return ["slurmd", "-D"]


def node_states(sinfo_out: str) -> dict[str, str]:
    """``{node: state}`` from ``sinfo -h -N -o "%N %T"`` (e.g. "idle", "allocated", "down*")."""
    states = {}
    for line in sinfo_out.splitlines():
        if line.strip():
            node, state = line.split()[:2]
            states[node] = state.lower()
    return states
