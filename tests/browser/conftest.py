"""A JupyterLab server on 127.0.0.1 with a token, and headless Debian chromium via Playwright."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"


@dataclass
class Lab:
    """A running JupyterLab server."""

    url: str
    token: str
    root: Path

    def open_url(self, notebook: str) -> str:
        """The notebook in a workspace of its own, started empty (``reset``): the notebooks
        that earlier tests opened in this server are not open behind it."""
        workspace = Path(notebook).stem
        return f"{self.url}/lab/workspaces/{workspace}/tree/{notebook}?reset&token={self.token}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"jupyter lab did not answer within {within}s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Start JupyterLab (loopback only, token auth); stop it and every kernel afterwards."""
    if shutil.which("jupyter-lab") is None and shutil.which("jupyter") is None:
        pytest.fail('jupyterlab is not installed: pip install -e ".[browser]"')
    root = tmp_path_factory.mktemp("lab")
    home = tmp_path_factory.mktemp("home")
    token, port = secrets.token_hex(16), _free_port()
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        NBACCEL_CONFIG_FILE=str(home / "nbaccel.yaml"),
    )
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        "--ServerApp.port_retries=0", "--LabApp.news_url=", "--LabApp.check_for_updates_class="
        "jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    if os.geteuid() == 0:  # CI containers run as root
        command.append("--allow-root")
    log = home / "lab.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        server = psutil.Process(proc.pid)
        _wait_ready(f"{url}/api/status?token={token}", proc, log, within=60)
        yield Lab(url, token, root)
    finally:
        family = [server, *server.children(recursive=True)] if proc.poll() is None else []
        proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        _, alive = psutil.wait_procs(family, timeout=10)
        for left in alive:  # only processes this fixture started, by pid
            left.kill()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, ARTIFACTS / "jupyterlab.log")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, driven by Playwright (its own browsers are never used)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as play:
        chromium = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def artifacts() -> Path:
    """Where screenshots go (``test-artifacts/browser``)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
