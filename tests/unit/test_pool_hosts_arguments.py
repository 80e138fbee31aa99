"""WorkerPool(hosts=...) and ``%nbaccel start --hosts``: checked before any process or ssh
connection starts; the status table gains a host column for a pool on other machines."""

from __future__ import annotations

import psutil
import pytest
from IPython.core.error import UsageError

from nbaccel.launch.parent.pool import WorkerPool
from nbaccel.magics.arguments import parse_line
from nbaccel.magics.show import StatusTable


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hosts": ["node1", "node1"]}, "node1"),
        ({"hosts": ["node1"], "num_nodes": 2}, "num_nodes"),
        ({"python": "/usr/bin/python3"}, "only apply to a launch on other machines"),
        ({"hosts": ["node1"], "connect_timeout": -1}, "connect_timeout"),
        ({"hosts": ["node1"], "env": {"1BAD": "x"}}, "bad variable name"),
    ],
)
def test_bad_hosts_settings_are_refused_before_anything_starts(
    kwargs: dict[str, object], message: str
) -> None:
    before = _children()
    with pytest.raises((ValueError, TypeError), match=message):
        WorkerPool(num_processes=1, **kwargs)  # type: ignore[arg-type]
    assert _children() == before  # no ssh, no agent, no worker


def test_the_magic_reads_hosts_as_a_list_or_slurm() -> None:
    options = parse_line("start -n 2 --hosts node1,root@node2:2222 --python /opt/py --cwd /w")
    assert options.hosts == ["node1", "root@node2:2222"]
    assert (options.python, options.cwd, options.connect_timeout) == ("/opt/py", "/w", None)
    assert parse_line("start -n 1 --hosts SLURM --connect_timeout 5").hosts == "slurm"
    assert parse_line("start -n 1").hosts is None
    with pytest.raises(UsageError, match="connect_timeout"):
        parse_line("start -n 1 --hosts a --connect_timeout soon")


def test_the_status_table_names_hosts_only_for_a_pool_on_hosts() -> None:
    local = StatusTable([{"rank": 0, "pid": 11, "state": "idle", "rss": 2**20, "device": "cpu"}])
    assert local.cells()[0][:2] == ["rank", "pid"]
    remote = StatusTable(
        [
            {"rank": 0, "host": "node1", "pid": 11, "state": "idle", "rss": None},
            {"rank": 1, "host": "node2", "pid": 12, "state": "running", "cell": "In [3]"},
        ]
    )
    cells = remote.cells()
    assert cells[0][:3] == ["rank", "host", "pid"]
    assert cells[2][:4] == ["1", "node2", "12", "running"]
    assert "node2" in repr(remote) and "<td>node2</td>" in remote._repr_html_()
