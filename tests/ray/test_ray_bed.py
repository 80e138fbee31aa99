"""The Ray bed itself, through the real path: drivers on the login machine (plain ``python -c``
runs there) see a head without CPUs and two nodes of one CPU each, a STRICT_SPREAD placement
group puts one task on each node, the state API answers, and a node that dies is declared dead
within seconds and comes back as a fresh node. (A Jupyter kernel as the driver and a cut cable
are the launch and pool tests' own, tests/ray/test_ray_*.py.)"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from typing import Any

import pytest

from tests.ray.bed_ray import ADDRESSES, NODES, BedError, RayBed


def driver(bed: RayBed, code: str, timeout: float = 90) -> Any:
    """Run ``code`` as a driver on ``login`` (after ``import json, ray`` and ``ray.init()``,
    which finds the cluster through RAY_ADDRESS); what it printed last, as JSON."""
    prologue = (
        "import json, logging, ray\nray.init(logging_level=logging.ERROR, log_to_driver=False)\n"
    )
    out = bed.python("login", prologue + code, timeout=timeout)
    # the last line that is JSON: Ray prints its own news on a driver's stdout too, before and
    # after what the code printed
    for line in reversed(out.strip().splitlines()):
        with contextlib.suppress(json.JSONDecodeError):
            return json.loads(line)
    raise AssertionError(f"the driver printed no JSON line:\n{out}")


def test_a_driver_on_login_sees_the_head_and_two_nodes(ray_bed: RayBed) -> None:
    nodes = driver(
        ray_bed,
        "nodes = [(n['NodeManagerAddress'], n['NodeManagerHostname'], n['Resources'].get('CPU',"
        " 0)) for n in ray.nodes() if n['Alive']]\n"
        "print(json.dumps([sorted(nodes), ray.cluster_resources().get('CPU')]))\n",
    )
    assert nodes == [
        [[ADDRESSES["login"], "login", 0], *([ADDRESSES[n], n, 1.0] for n in NODES)],
        2.0,
    ]


def test_a_strict_spread_placement_group_runs_on_both_nodes(ray_bed: RayBed) -> None:
    places = driver(
        ray_bed,
        "import socket\n"
        "from ray.util.placement_group import placement_group, remove_placement_group\n"
        "from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy\n"
        "pg = placement_group([{'CPU': 1}, {'CPU': 1}], strategy='STRICT_SPREAD')\n"
        "ray.get(pg.ready(), timeout=60)\n"
        "@ray.remote(num_cpus=1)\n"
        "def where():\n"
        "    import tests.support.paths  # the checkout is on the nodes' PYTHONPATH\n"
        "    return ray.util.get_node_ip_address(), socket.gethostname()\n"
        "refs = [where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i))"
        ".remote() for i in range(2)]\n"
        "print(json.dumps(sorted(ray.get(refs, timeout=60))))\n"
        "remove_placement_group(pg)\n",
    )
    assert places == [[ADDRESSES[n], n] for n in NODES]


def test_the_state_api_answers_on_login(ray_bed: RayBed) -> None:
    found = driver(
        ray_bed,
        "from ray.util.placement_group import placement_group\n"
        "from ray.util.state import list_actors, list_placement_groups\n"
        "@ray.remote(num_cpus=1)\n"
        "class Probe:\n"
        "    def where(self):\n"
        "        return ray.util.get_node_ip_address()\n"
        "probe = Probe.options(name='bed-probe').remote()\n"
        "ip = ray.get(probe.where.remote(), timeout=60)\n"
        "pg = placement_group([{'CPU': 1}], name='bed-pg')\n"
        "ray.get(pg.ready(), timeout=60)\n"
        "actors = list_actors(filters=[('class_name', '=', 'Probe'), ('state', '=', 'ALIVE')])\n"
        "groups = list_placement_groups(filters=[('name', '=', 'bed-pg')])\n"
        "print(json.dumps([ip, [a.name for a in actors], [g.state for g in groups]]))\n",
    )
    assert found[0] in (ADDRESSES["node1"], ADDRESSES["node2"])
    assert found[1:] == [["bed-probe"], ["CREATED"]]


def test_a_killed_node_is_dead_in_seconds_and_restarts(ray_bed: RayBed) -> None:
    killed = time.monotonic()
    ray_bed.kill_node("node2")
    try:
        ray_bed.wait_alive(["login", "node1"], timeout=30)
        assert time.monotonic() - killed < 30
    finally:
        ray_bed.restart_node("node2", timeout=60)
    assert ray_bed.nodes_alive() == 3


def test_a_head_that_fails_is_named_and_nothing_is_left(ray_ready: None) -> None:
    bed = RayBed(prefix="nbq", object_store_bytes=1)  # a bed of its own, beside the session's
    begin = time.monotonic()
    with pytest.raises(BedError) as failed:
        bed.start()
    assert time.monotonic() - begin < 30  # the head's end is seen at once, not waited out
    message = str(failed.value)
    assert message.startswith("`ray start` on login exited with code 1"), message
    assert "minimum allowed is 78643200 bytes" in message  # the end of its log, quoted
    assert bed.leftovers() == []
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "nbq-" not in names
