"""The config file's ``hosts``, ``hosts_python``, ``hosts_cwd`` and ``hosts_connect_timeout``:
checked by the launcher's own rules, and the defaults of ``notebook_launcher(hosts=, python=,
cwd=, connect_timeout=)`` and of ``nbaccel launch`` (an argument given wins)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbaccel.config import (
    ConfigError,
    ConfigFile,
    config_in_force,
    load_config_file,
    resolve_launch,
    save_config_file,
)
from nbaccel.launch.config import LaunchConfig
from nbaccel.launch.hostargs import HostTarget
from nbaccel.launch.parent.notebook import debug_launcher


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("NBACCEL_CONFIG_FILE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)


def _file(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch | None = None) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    if monkeypatch is not None:  # the config file in force
        monkeypatch.setenv("NBACCEL_CONFIG_FILE", str(path))
    return path


HOSTS_FILE = (
    "hosts:\n- node1\n- root@node2:2222\nhosts_python: /opt/venv/bin/python\n"
    "hosts_cwd: /data/run\nhosts_connect_timeout: 12\n"
)


def test_the_keys_load_and_round_trip_and_are_left_out_when_unset(tmp_path: Path) -> None:
    loaded = load_config_file(_file(tmp_path, HOSTS_FILE))
    cfg = loaded.config
    assert cfg.hosts == ["node1", "root@node2:2222"]
    assert (cfg.hosts_python, cfg.hosts_cwd, cfg.hosts_connect_timeout) == (
        "/opt/venv/bin/python",
        "/data/run",
        12.0,
    )
    assert {"hosts", "hosts_python", "hosts_cwd", "hosts_connect_timeout"} <= set(loaded.keys)
    again = load_config_file(save_config_file(cfg, tmp_path / "again.yaml"))
    assert again.config == cfg
    plain = save_config_file(ConfigFile(num_processes=2), tmp_path / "plain.yaml").read_text()
    assert "hosts" not in plain  # nbaccel's own keys: written only when set


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("hosts: node1, node2\n", ["node1", "node2"]),  # one line, as the flag and the panel
        ("hosts: slurm\n", "slurm"),
        ("hosts: SLURM\n", "slurm"),
        ("hosts: []\n", None),
        ("hosts: ''\n", None),
        ("hosts:\n", None),
    ],
)
def test_a_list_one_line_or_slurm(tmp_path: Path, text: str, hosts: object) -> None:
    assert load_config_file(_file(tmp_path, text)).config.hosts == hosts


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("hosts: [node1, node1]\n", "key 'hosts' is not valid: hosts names 'node1' twice"),
        ("hosts: [node1, '-oProxyCommand=x']\n", "not a host ssh can reach"),
        ("hosts: [node1, 3]\n", "hosts[1]=3 must be a non-empty string"),
        ("hosts: ['node1:99999']\n", "a port is a number from 1 to 65535"),
        ("hosts: 7\n", "hosts must be a list of host names"),
        ("hosts: [node1]\nhosts_connect_timeout: 0\n", "'hosts_connect_timeout' is not valid"),
        ("hosts: [node1]\nhosts_python: [a]\n", "hosts_python must be a non-empty path"),
        (
            "hosts: [node1, node2]\nnum_machines: 2\nmain_process_ip: 10.0.0.1\n",
            "key 'hosts' starts every machine from this notebook, so num_machines and "
            "machine_rank do not apply",
        ),
    ],
)
def test_bad_values_name_the_key_the_file_and_the_rule(
    tmp_path: Path, text: str, words: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_config_file(path)
    assert str(path) in str(raised.value) and words in str(raised.value)


def test_notebook_launcher_takes_the_files_hosts_when_it_is_given_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _file(tmp_path, HOSTS_FILE, monkeypatch)
    config = LaunchConfig.build(num_processes=2, hosts=None)
    assert config.hosts is not None
    assert config.hosts.targets == (
        HostTarget("node1", "node1"),
        HostTarget("root@node2:2222", "node2", "root", 2222),
    )
    assert (config.hosts.python, config.hosts.cwd) == ("/opt/venv/bin/python", "/data/run")
    assert config.hosts.connect_timeout == 12.0 and config.world_size == 4
    given = LaunchConfig.build(hosts=["node3"], python="/usr/bin/python3", connect_timeout=3)
    assert given.hosts is not None and [t.entry for t in given.hosts.targets] == ["node3"]
    assert (given.hosts.python, given.hosts.cwd) == ("/usr/bin/python3", "/data/run")
    assert given.hosts.connect_timeout == 3.0  # each argument wins over its own key
    assert LaunchConfig.build(num_processes=2, hosts=False).hosts is None  # this machine
    assert LaunchConfig.build(num_processes=2).hosts is None  # WorkerPool passes no hosts=


@pytest.mark.parametrize("kwargs", [{"num_nodes": 2}, {"node_rank": 1, "num_nodes": 2}])
def test_the_files_hosts_with_num_nodes_is_the_arguments_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, int]
) -> None:
    _file(tmp_path, "hosts: [node1, node2]\n", monkeypatch)
    with pytest.raises(ValueError, match="num_nodes and node_rank do not apply") as raised:
        LaunchConfig.build(hosts=None, **kwargs)
    assert "hosts=False" in str(raised.value)
    with pytest.raises(ValueError, match="num_nodes and node_rank do not apply"):
        LaunchConfig.build(hosts=["node1", "node2"], **kwargs)  # the same for the argument
    assert LaunchConfig.build(hosts=False, master_addr="10.0.0.1", **kwargs).num_nodes == 2


def test_the_files_slurm_is_resolved_when_a_launch_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    _file(tmp_path, "hosts: slurm\nhosts_python: /opt/py\n", monkeypatch)
    assert config_in_force() is not None  # the file itself is valid anywhere
    with pytest.raises(ValueError, match=r"outside one \(SLURM_JOB_ID is not set\)"):
        LaunchConfig.build(hosts=None)


def test_hosts_keys_without_hosts_are_kept_for_when_hosts_are_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _file(tmp_path, "hosts_python: /opt/py\nhosts_cwd: /data\n", monkeypatch)
    assert LaunchConfig.build(num_processes=1, hosts=None).hosts is None  # nothing refused
    config = LaunchConfig.build(num_processes=1, hosts=["node1"])
    assert config.hosts is not None and config.hosts.python == "/opt/py"


def test_debug_launcher_stays_on_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _file(tmp_path, "hosts: [nosuch.invalid]\n", monkeypatch)
    assert debug_launcher(lambda: "here", num_processes=1) == ["here"]


def test_nbaccel_launch_resolves_the_flag_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _file(tmp_path, HOSTS_FILE, monkeypatch)
    loaded = config_in_force()
    from_file = resolve_launch({}, loaded)
    assert from_file.config.hosts == ["node1", "root@node2:2222"]
    assert from_file.sources["hosts"] == "config file"
    assert from_file.processes_per_machine == 1  # one on each host unless said
    flag = resolve_launch({"hosts": "node3,node4", "num_processes": 2}, loaded)
    assert flag.config.hosts == ["node3", "node4"] and flag.sources["hosts"] == "argument"
    assert flag.processes_per_machine == 2 and flag.config.hosts_python == "/opt/venv/bin/python"
    assert resolve_launch({"hosts": ""}, loaded).config.hosts is None  # --hosts '': here
    with pytest.raises(ConfigError, match="key 'hosts' is not valid: hosts names 'a' twice"):
        resolve_launch({"hosts": "a, a"}, loaded)
