"""notebooks/10_multi_host.ipynb, cell by cell, in a real Jupyter kernel on the Ray bed's head,
with its ``HOSTS`` set to ``"ray"``: a training run on both nodes and a warm pool across them,
and nothing of nbaccel's left afterwards."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tests.hosts.login_kernel import LoginKernel, agents_left_after
from tests.ray.bed_ray import RayBed
from tests.ray.kernels import nbaccel_listeners

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "10_multi_host.ipynb"


def test_the_multi_host_notebook_runs_on_the_ray_cluster(
    ray_bed: RayBed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    kernel = LoginKernel(ray_bed, tmp_path_factory.mktemp("ray-notebook"))  # type: ignore[arg-type]
    outputs = []
    try:
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            source = cell.source
            if "parameters" in cell.metadata.get("tags", []):  # as papermill sets parameters
                source += '\nHOSTS = "ray"\nPER_HOST = 1'
            outputs.append(kernel.ok(source, timeout=240))
    finally:
        kernel.stop()
    text = "\n".join(outputs)
    accuracies = re.findall(r"rank (\d) of 2: accuracy (0\.\d+)", text)
    assert [rank for rank, _ in accuracies] == ["0", "1"], text
    assert len({accuracy for _, accuracy in accuracies}) == 1, text  # gathered: one figure
    assert float(accuracies[0][1]) > 0.8, text
    assert "[node2 rank1]: " in text, text  # the launch's output, prefixed with node and rank
    assert "a pool of 2 processes on node1, node2 is ready" in text, text
    for rank in range(2):
        node = f"node{1 + rank}"
        assert f"[{node} rank{rank}]: {node}: rank {rank} of 2, the ranks' sum is 3" in text
    assert re.search(r"\n1 +node2 +idle", text), text  # %nbaccel where, with each node
    assert agents_left_after(20) == []
    for node in ("node1", "node2"):
        assert nbaccel_listeners(ray_bed, node) == [], node
