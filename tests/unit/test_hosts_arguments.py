"""hosts=, python=, cwd=, env=, connect_timeout=: checked in LaunchConfig.build before anything
starts; the agent's frames and the host prefix."""

from __future__ import annotations

import pytest

from nbaccel.launch.agent.wire import (
    MAGIC,
    Exit,
    Fatal,
    FrameReader,
    Hello,
    Job,
    Message,
    Output,
    Ping,
    Signal,
    Task,
    encode_frame,
)
from nbaccel.launch.config import LaunchConfig
from nbaccel.launch.hostargs import HostTarget
from nbaccel.launch.parent.hostlinks import ssh_argv
from nbaccel.launch.prefix import format_prefix
from nbaccel.launch.slurmhosts import AGENT_MODULE, srun_argv


def build(**kwargs: object) -> LaunchConfig:
    kwargs.setdefault("num_processes", 2)
    return LaunchConfig.build(**kwargs)


def test_hosts_are_parsed_with_users_and_ports() -> None:
    config = build(hosts=["node1", "root@node2:2222", "[2001:db8::1]:22", "10.0.0.3"])
    assert config.hosts is not None
    assert config.hosts.targets == (
        HostTarget("node1", "node1"),
        HostTarget("root@node2:2222", "node2", "root", 2222),
        HostTarget("[2001:db8::1]:22", "2001:db8::1", None, 22),
        HostTarget("10.0.0.3", "10.0.0.3"),
    )
    assert config.world_size == 8
    assert config.hosts.connect_timeout == 30.0 and config.hosts.env == {}


def test_the_other_settings_travel() -> None:
    config = build(
        hosts=("node1",), python="/opt/py/bin/python", cwd="/data", env={"A": 1}, connect_timeout=5
    )
    assert config.hosts is not None
    assert (config.hosts.python, config.hosts.cwd) == ("/opt/py/bin/python", "/data")
    assert config.hosts.env == {"A": "1"} and config.hosts.connect_timeout == 5.0


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"hosts": "node1"}, TypeError, "hosts must be a list"),
        ({"hosts": []}, ValueError, "names no machine"),
        ({"hosts": ["node1", "node1"]}, ValueError, "names 'node1' twice"),
        ({"hosts": ["node1", 3]}, TypeError, "hosts[1]=3"),
        ({"hosts": ["node1:0"]}, ValueError, "port is a number from 1 to 65535"),
        ({"hosts": ["node1:http"]}, ValueError, "has the port 'http'"),
        ({"hosts": ["-oProxyCommand=x"]}, ValueError, "not a host ssh can reach"),
        ({"hosts": ["a b"]}, ValueError, "not a host ssh can reach"),
        ({"hosts": ["node1"], "num_nodes": 2}, ValueError, "num_nodes and node_rank"),
        ({"hosts": ["node1"], "node_rank": 1}, ValueError, "num_nodes and node_rank"),
        ({"hosts": ["node1"], "connect_timeout": 0}, ValueError, "connect_timeout=0"),
        ({"hosts": ["node1"], "connect_timeout": "5"}, ValueError, "connect_timeout='5'"),
        ({"hosts": ["node1"], "env": {"1A": "x"}}, ValueError, "bad variable name"),
        ({"hosts": ["node1"], "env": ["A"]}, TypeError, "env must be a dict"),
        ({"hosts": ["node1"], "python": ""}, TypeError, "python must be"),
        ({"python": "/usr/bin/python3"}, ValueError, "pass hosts=[...]"),
        ({"connect_timeout": 3}, ValueError, "pass hosts=[...]"),
    ],
)
def test_bad_values_are_refused_naming_the_argument(
    kwargs: dict[str, object], error: type[Exception], words: str
) -> None:
    with pytest.raises(error) as raised:
        build(**kwargs)
    assert words in str(raised.value)


def test_same_host_on_two_ports_is_two_machines() -> None:
    config = build(hosts=["node2", "node2:2222"])
    assert config.hosts is not None and len(config.hosts.targets) == 2


def test_num_processes_is_per_host_whatever_gpus_this_machine_has() -> None:
    config = build(hosts=["a", "b"], num_processes=3)
    assert config.world_size == 6 and config.cpu  # the hosts' GPUs decide later


def test_ssh_command_reads_the_users_config_and_never_asks() -> None:
    argv = ssh_argv(HostTarget("u@h:2222", "h", "u", 2222), "/p y/python", 7.5)
    assert argv == [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=8",
        "-p",
        "2222",
        "--",
        "u@h",
        "'/p y/python' -m nbaccel.launch.agent",
    ]


def test_frames_round_trip_after_a_login_banner() -> None:
    frames = [
        Hello("3.11", "2.5.0", "0.1.0", "node1", "10.0.0.1", 29500, 0, 42),
        Job("10.0.0.1", "/w", ["/a"], 10.0, store_world_size=4, specs=b"\x00specs"),
        Message(3, b"\x80pickled"),
        Task(2, b"\x80where"),
        Output(2, 1, b"line\n"),
        Output(2, 2, b""),
        Exit(3, -9),
        Fatal("it broke"),
        Ping(),
        Signal(1, 15),
    ]
    stream = b"Welcome to node1!\n" + MAGIC + b"".join(encode_frame(f) for f in frames)
    reader = FrameReader(expect_magic=True)
    got = []
    for i in range(0, len(stream), 7):  # in small pieces, as a pipe may deliver them
        got += reader.feed(stream[i : i + 7])
    assert got == frames
    assert bytes(reader.preamble) == b"Welcome to node1!\n"


def test_the_prefix_names_the_host() -> None:
    assert format_prefix(None, rank=3, local_rank=1, host="node2") == "[node2 rank3]: "
    assert format_prefix(None, rank=3, local_rank=1) == "[rank3]: "
    assert format_prefix("${host}/${local_rank}| ", rank=3, local_rank=1, host="n") == "n/1| "


def test_slurm_outside_an_allocation_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match=r"outside one \(SLURM_JOB_ID is not set\).*salloc -N 2"):
        build(hosts="slurm")
    with pytest.raises(TypeError, match=r'"slurm" for the nodes.*"ray" for a Ray cluster'):
        build(hosts="node1")  # one machine is a list of one


def test_slurm_needs_its_commands_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(
        ValueError, match="runs in SLURM job 7, but srun and scontrol are not on its PATH"
    ):
        build(hosts="slurm")


def test_the_srun_command_starts_one_agent_step_beside_the_kernels() -> None:
    argv = srun_argv("42", "node2", "/opt/py/bin/python")
    assert argv[0] == "srun" and argv[-3:] == ["/opt/py/bin/python", "-m", AGENT_MODULE]
    for option in ("--jobid=42", "--nodelist=node2", "--nodes=1", "--ntasks=1"):
        assert option in argv
    assert {"--overlap", "--whole", "--unbuffered"} <= set(argv)


def test_a_remote_ranks_variables_copy_the_allow_list_and_env_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a rank on another host gets: the kernel's torch / NCCL / tracker switches (not
    its paths or its own launch's variables), the launch variables, ``env=`` above both, and
    the store's secret, which ``env=`` cannot replace."""
    from nbaccel.launch.parent.hoststart import HostAgents, host_spec
    from nbaccel.launch.parent.placement import RankWork
    from nbaccel.launch.spec import WorkerMode

    for name, value in {
        "NCCL_DEBUG": "INFO",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "WANDB_MODE": "offline",
        "HF_HOME": "/kernel/hf",
        "TORCHELASTIC_RUN_ID": "kernels-own",
        "RANK": "7",
    }.items():
        monkeypatch.setenv(name, value)
    config = build(
        hosts=["node1", "node2"],
        env={"NCCL_DEBUG": "WARN", "NBACCEL_STORE_PREFIX": "mine"},
        cpu=True,
    )
    up = HostAgents(config, [], "203.0.113.11", 29400)
    env = host_spec(up, 3, 0, False, RankWork(WorkerMode.LAUNCH)).env
    assert env["NCCL_DEBUG"] == "WARN" and env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    assert env["WANDB_MODE"] == "offline"
    assert "HF_HOME" not in env and "TORCHELASTIC_RUN_ID" not in env
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("3", "4", "1")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("203.0.113.11", "29400")
    assert env["NBACCEL_STORE_PREFIX"] == up.secret and len(up.secret) == 32
    assert HostAgents(config, [], "x", 1).secret != up.secret  # drawn per attempt
