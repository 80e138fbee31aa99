"""notebooks/10_multi_host.ipynb, cell by cell, in a real Jupyter kernel on the bed's login
machine, with its ``HOSTS`` set to the bed's nodes: a training run on both nodes and a warm
pool across them, and nothing left behind on either."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tests.hosts.bed import HostBed
from tests.hosts.login_kernel import LoginKernel, agents_left_after

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "10_multi_host.ipynb"


def test_the_multi_host_notebook_runs_on_the_bed(
    host_bed: HostBed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    kernel = LoginKernel(host_bed, tmp_path_factory.mktemp("hosts-notebook"))
    outputs = []
    try:
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            source = cell.source
            if "parameters" in cell.metadata.get("tags", []):  # as papermill sets parameters
                source += '\nHOSTS = ["node1", "node2"]\nPER_HOST = 2'
            outputs.append(kernel.ok(source, timeout=240))
    finally:
        kernel.stop()
    text = "\n".join(outputs)
    accuracies = re.findall(r"rank (\d) of 4: accuracy (0\.\d+)", text)
    assert [rank for rank, _ in accuracies] == ["0", "1", "2", "3"], text
    assert len({accuracy for _, accuracy in accuracies}) == 1, text  # gathered: one figure
    assert float(accuracies[0][1]) > 0.8, text
    assert "[node2 rank3]: " in text, text  # the launch's output, prefixed with host and rank
    assert "a pool of 4 processes on node1, node2 is ready" in text, text
    for rank in range(4):
        node = f"node{1 + rank // 2}"
        assert f"[{node} rank{rank}]: {node}: rank {rank} of 4, the ranks' sum is 10" in text
    assert re.search(r"\n3 +node2 +idle", text), text  # %nbaccel where, with each host
    assert agents_left_after(15) == []
