"""``ray`` in every front end, as ``slurm`` is: ``%nbaccel start --hosts ray --num_nodes N``,
``nbaccel launch --hosts ray [--num_machines N]``, the config file's ``hosts: ray`` (its
``num_machines`` the launcher's ``num_nodes``) and the config panel's Hosts field.

No Ray cluster is needed: each test goes through the real parsing path and stops where a
cluster would be joined, either at ``launch/hostargs.py``'s ``connect``/``choose_nodes``
(recorded, then refused) or at a ``RAY_ADDRESS`` that nobody answers at.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from IPython.core.error import UsageError

from nbaccel.cli import hostlaunch
from nbaccel.cli import launch as launch_cli
from nbaccel.cli.main import build_parser, main
from nbaccel.config import (
    ConfigError,
    ConfigFile,
    config_in_force,
    launcher_defaults,
    load_config_file,
    resolve_launch,
    save_config_file,
)
from nbaccel.config.hosts import ray_num_nodes
from nbaccel.launch import hostargs
from nbaccel.launch.config import LaunchConfig
from nbaccel.launch.parent.pool import WorkerPool
from nbaccel.magics.arguments import LINE_USAGE, parse_line, pool_options
from nbaccel.magics.commands import PoolMagics
from nbaccel.widgets import ConfigPanel, Hardware, PanelValues, validate
from nbaccel.widgets.form import launch_options

CPU2 = Hardware(cpu_cores=2, description="CPU (test, 2 cores)")
STOP = "test: stopped where the Ray cluster's nodes would be chosen"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No config file in force, no Ray address; the working directory is a temporary one."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("NBACCEL_CONFIG_FILE", "HF_HOME", "XDG_CACHE_HOME", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hello')\n")


@pytest.fixture
def chosen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """Where a launch on ``hosts="ray"`` would join the cluster: what it asks for is recorded,
    then refused with :data:`STOP` (a ValueError, as too few nodes would be)."""
    calls: list[dict[str, Any]] = []

    def connect(timeout: float) -> str:
        calls.append({"connect_timeout": timeout})
        return "10.0.0.1:6379"

    def choose_nodes(address: str, num_nodes: int | None, per_node: int, cpu: Any) -> Any:
        calls[-1].update(address=address, num_nodes=num_nodes, per_node=per_node, cpu=cpu)
        raise ValueError(STOP)

    monkeypatch.setattr(hostargs, "connect", connect)
    monkeypatch.setattr(hostargs, "choose_nodes", choose_nodes)
    yield calls


@pytest.fixture
def nobody_answers(monkeypatch: pytest.MonkeyPatch) -> str:
    """``RAY_ADDRESS`` at a port of this machine that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"127.0.0.1:{port}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    return address


def _config_file(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))
    return path


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


# -- the rule ---------------------------------------------------------------------------------


def test_num_machines_is_the_ray_nodes_above_one_and_only_beside_ray() -> None:
    assert ray_num_nodes("ray", 3) == 3
    assert ray_num_nodes(" RAY ", 2) == 2
    assert ray_num_nodes("ray", 1) is None  # the default: every node that fits
    assert ray_num_nodes("slurm", 3) is None
    assert ray_num_nodes(["node1", "node2"], 3) is None
    assert ray_num_nodes(None, 3) is None


# -- %nbaccel start --------------------------------------------------------------------------


def test_the_magic_reads_hosts_ray_and_num_nodes() -> None:
    options = parse_line("start -n 2 --hosts Ray --num_nodes 3 --connect_timeout 5")
    assert (options.hosts, options.num_nodes, options.connect_timeout) == ("ray", 3, 5.0)
    kwargs = pool_options(options)
    assert kwargs["hosts"] == "ray" and kwargs["num_nodes"] == 3
    assert kwargs["num_processes"] == 2 and "command" not in kwargs
    assert parse_line("start -n 1 --hosts ray").num_nodes is None  # every node that fits
    assert parse_line("start -n 1").num_nodes is None
    assert "--hosts node1,node2|slurm|ray [--num_nodes N]" in LINE_USAGE
    with pytest.raises(UsageError, match="num_nodes"):
        parse_line("start -n 1 --hosts ray --num_nodes two")


def test_the_magic_hands_num_nodes_to_the_pool(
    chosen: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    magics = PoolMagics(None)
    before = _children()
    with pytest.raises(UsageError, match=STOP):
        magics.nbaccel_line("start -n 2 --hosts ray --num_nodes 3 --connect_timeout 4 --cpu")
    assert chosen == [
        {
            "connect_timeout": 4.0,
            "address": "10.0.0.1:6379",
            "num_nodes": 3,
            "per_node": 2,
            "cpu": True,
        }
    ]
    with pytest.raises(UsageError, match=STOP):
        magics.nbaccel_line("start -n 1 --hosts ray")
    assert chosen[-1]["num_nodes"] is None and chosen[-1]["connect_timeout"] == 30.0
    assert magics.pool is None and _children() == before  # no agent, no rank


def test_the_magic_refuses_num_nodes_without_ray(chosen: list[dict[str, Any]]) -> None:
    magics = PoolMagics(None)
    with pytest.raises(UsageError, match=r'num_nodes=2 applies to a pool only with hosts="ray"'):
        magics.nbaccel_line("start -n 1 --num_nodes 2")
    with pytest.raises(UsageError, match="num_nodes and node_rank do not apply"):
        magics.nbaccel_line("start -n 1 --num_nodes 2 --hosts node1")
    assert chosen == [] and magics.pool is None


def test_a_ray_pool_without_a_cluster_is_refused_within_connect_timeout(
    nobody_answers: str,
) -> None:
    before = _children()
    options = pool_options(parse_line("start -n 1 --hosts ray --num_nodes 2 --connect_timeout 2"))
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=f"nothing answers at RAY_ADDRESS={nobody_answers}"):
        WorkerPool(**options)
    assert time.monotonic() - started < 30  # the TCP check, not Ray's minute of retries
    assert _children() == before


def test_the_magic_says_a_missing_cluster_without_a_traceback(nobody_answers: str) -> None:
    """``%nbaccel start --hosts ray`` with nothing at ``RAY_ADDRESS``: IPython shows a
    ``UsageError`` as its message alone; the pool is not started."""
    magics = PoolMagics(None)
    before = _children()
    with pytest.raises(UsageError, match=f"^%nbaccel start: .*RAY_ADDRESS={nobody_answers}"):
        magics.nbaccel_line("start -n 1 --hosts ray --connect_timeout 2")
    assert magics.pool is None and _children() == before


# -- nbaccel launch --------------------------------------------------------------------------


def _resolve(*argv: str) -> Any:
    args = build_parser().parse_args(["launch", *argv, "train.py"])
    return launch_cli.resolve_from_args(args)


def test_nbaccel_launch_parses_hosts_ray_and_num_machines() -> None:
    resolved = _resolve("--hosts", "RAY", "--num_machines", "3", "--num_processes", "2")
    cfg = resolved.config
    assert (cfg.hosts, cfg.num_machines, cfg.num_processes) == ("ray", 3, 6)
    assert cfg.main_process_ip is None  # no machine 0 to name: the launch starts every node
    assert resolved.processes_per_machine == 2 and resolved.sources["hosts"] == "argument"
    describe = hostlaunch._describe(resolved)
    assert "2 process(es) x 3 of the Ray cluster's nodes (ray)" in describe
    every = _resolve("--hosts", "ray")
    assert every.config.num_machines == 1 and every.processes_per_machine == 1
    assert "1 process(es) x the Ray cluster's nodes (ray)" in hostlaunch._describe(every)
    with pytest.raises(ConfigError, match="machine_rank=1 does not apply"):
        _resolve("--hosts", "ray", "--num_machines", "2", "--machine_rank", "1")


@pytest.mark.parametrize(("argv", "nodes"), [(["--num_machines", "2"], 2), ([], None)])
def test_nbaccel_launch_hands_num_machines_to_the_launcher_as_num_nodes(
    chosen: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    nodes: int | None,
) -> None:
    argv = ["launch", "--hosts", "ray", *argv, "--num_processes", "2", "--cpu", "train.py"]
    assert main(argv) == 2  # checked before anything starts
    assert STOP in capsys.readouterr().err
    assert chosen[0]["num_nodes"] == nodes and chosen[0]["per_node"] == 2
    assert chosen[0]["cpu"] is True


def test_nbaccel_launch_on_ray_without_a_cluster_exits_2(
    nobody_answers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["launch", "--hosts", "ray", "--hosts_connect_timeout", "2", "--cpu", "train.py"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"nothing answers at RAY_ADDRESS={nobody_answers} within 2s" in err
    assert "Traceback" not in err


def test_nbaccel_launch_names_slurm_and_ray_where_hosts_flags_come_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["launch", "--hosts_cwd", "/data", "train.py"]) == 2
    assert "pass --hosts node1,node2, slurm or ray" in capsys.readouterr().err


# -- the config file -------------------------------------------------------------------------

RAY_FILE = "hosts: ray\nnum_machines: 3\nnum_processes: 6\nhosts_connect_timeout: 2\n"


def test_the_files_hosts_ray_takes_num_machines_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "ray.yaml"
    path.write_text(RAY_FILE.replace("hosts: ray", "hosts: RAY"))
    cfg = load_config_file(path).config
    assert (cfg.hosts, cfg.num_machines, cfg.processes_per_machine) == ("ray", 3, 2)
    again = load_config_file(save_config_file(cfg, tmp_path / "again.yaml")).config
    assert again == cfg
    assert ConfigFile(hosts="ray").num_machines == 1  # every node that fits


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("hosts: ray\nnum_machines: 2\nmachine_rank: 1\n", "machine_rank=1 does not apply"),
        (  # a list or slurm: num_machines above 1 beside them stays an error
            "hosts: slurm\nnum_machines: 2\n",
            "key 'hosts' starts every machine from this notebook, so num_machines",
        ),
        ("hosts: ray\nnum_machines: 2\nnum_processes: 3\n", "does not divide among 2"),
    ],
)
def test_the_files_bad_ray_settings_name_the_key(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config_file(path)
    assert str(path) in str(raised.value) and words in str(raised.value)


def test_the_files_num_machines_becomes_num_nodes_with_its_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config_file(tmp_path, RAY_FILE, monkeypatch)
    out = launcher_defaults({"hosts": None, "num_nodes": None, "num_processes": None})
    assert (out["hosts"], out["num_nodes"], out["num_processes"]) == ("ray", 3, 2)
    assert out["connect_timeout"] == 2.0
    assert launcher_defaults({"hosts": None, "num_nodes": 1})["num_nodes"] == 1  # given: wins
    assert launcher_defaults({"hosts": "ray", "num_nodes": None})["num_nodes"] is None
    assert launcher_defaults({"hosts": ["node1"], "num_nodes": None})["num_nodes"] is None
    assert launcher_defaults({"hosts": False, "num_nodes": None})["num_nodes"] is None
    _config_file(tmp_path, "hosts: ray\nnum_processes: 2\n", monkeypatch)
    assert launcher_defaults({"hosts": None, "num_nodes": None})["num_nodes"] is None


def test_the_files_hosts_ray_reaches_the_launch_with_its_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chosen: list[dict[str, Any]]
) -> None:
    _config_file(tmp_path, RAY_FILE, monkeypatch)
    assert config_in_force() is not None  # valid without a cluster
    with pytest.raises(ValueError, match=STOP):
        LaunchConfig.build(hosts=None, num_nodes=None)  # notebook_launcher's defaults
    assert chosen[-1] == {
        "connect_timeout": 2.0,
        "address": "10.0.0.1:6379",
        "num_nodes": 3,
        "per_node": 2,
        "cpu": None,
    }
    resolved = resolve_launch({}, config_in_force())
    assert resolved.config.hosts == "ray" and resolved.processes_per_machine == 2


def test_the_files_hosts_ray_without_a_cluster_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nobody_answers: str
) -> None:
    _config_file(tmp_path, RAY_FILE, monkeypatch)
    with pytest.raises(ConnectionError, match="within 2s"):
        LaunchConfig.build(hosts=None)


# -- the config panel ------------------------------------------------------------------------


def test_the_panel_takes_ray_with_machines_as_its_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chosen: list[dict[str, Any]]
) -> None:
    path = tmp_path / "panel.yaml"
    panel = ConfigPanel(hardware=CPU2, path=path)
    panel.num_processes = 2
    panel.hosts = " Ray "
    panel.num_machines = 3
    assert panel.errors == {}  # no machine 0 address or port: this notebook starts them
    assert panel.config.hosts == "ray" and panel.config.num_machines == 3
    assert panel.config.num_processes == 6
    options = panel.launch_options
    assert options["hosts"] == "ray" and options["num_nodes"] == 3 and "node_rank" not in options
    panel.save()
    monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))
    loaded = load_config_file(path).config
    assert (loaded.hosts, loaded.num_machines, loaded.processes_per_machine) == ("ray", 3, 2)
    other = ConfigPanel(hardware=CPU2)
    other.load()
    assert (other.hosts, other.num_machines, other.num_processes) == ("ray", 3, 2)
    with pytest.raises(ValueError, match=STOP):
        LaunchConfig.build(hosts=None)  # what the saved file makes of notebook_launcher
    assert (chosen[-1]["num_nodes"], chosen[-1]["per_node"]) == (3, 2)


def test_the_panels_ray_counts_its_nodes_when_the_launch_starts() -> None:
    values = PanelValues(hosts="ray", num_processes=2, display_ranks="all")
    assert validate(values, CPU2) == {}
    options = launch_options(values)
    assert options["hosts"] == "ray" and "num_nodes" not in options  # every node that fits
    assert validate(PanelValues(hosts="ray", display_ranks="7"), CPU2) == {}  # not known yet
    few = validate(PanelValues(hosts="ray", num_machines=2, display_ranks="7"), CPU2)
    assert few == {"display_ranks": "ranks 0..1 exist with 2 process(es)"}
    ranked = validate(PanelValues(hosts="ray", num_machines=2, machine_rank=1), CPU2)
    assert "leave it at 0" in ranked["machine_rank"]
    assert "ray" in ConfigPanel.hosts.help
