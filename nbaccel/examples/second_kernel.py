"""A second Jupyter kernel on this machine that plays machine 1 in the multi-node notebook."""

from __future__ import annotations

import contextlib
import re
import time
from queue import Empty
from typing import Any

from ..environment import environment_for_child

__all__ = ["SecondKernel", "load_ipython_extension"]

# Variables that would tell the second kernel it is already inside a launch.
_LAUNCH_VARIABLES = re.compile(
    r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|NODE_RANK|ROLE_RANK|"
    r"ROLE_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*|NBACCEL_.*|ACCELERATE_.*)$"
)
_SETTING = re.compile(r"^[A-Z][A-Z0-9_]*$")


class SecondKernel:
    """One extra IPython kernel (this Python) that runs code in the background."""

    def __init__(self, startup_timeout: float = 60.0) -> None:
        # jupyter_client is there only with the notebook extra
        from jupyter_client.manager import KernelManager

        env = environment_for_child(_LAUNCH_VARIABLES)
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=startup_timeout)

    def submit(self, code: str) -> str:
        """Start running ``code``; return the message id to :meth:`collect` it with."""
        return str(self.client.execute(code))

    def collect(self, msg_id: str, timeout: float = 300.0) -> tuple[str, str]:
        """Wait for the code to finish; return its output and its error (``""`` if none)."""
        deadline, output, error = time.monotonic() + timeout, [], ""
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the second kernel did not finish within {timeout}s")
            try:
                message = self.client.get_iopub_msg(timeout=1.0)
            except Empty:
                continue
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                output.append(content["text"])
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(output), error

    def shutdown(self) -> None:
        """Stop the kernel and its channels."""
        with contextlib.suppress(Exception):
            self.client.stop_channels()
        with contextlib.suppress(Exception):
            self.manager.shutdown_kernel(now=True)


def _settings(namespace: dict[str, Any]) -> str:
    """Python assignments for the notebook's UPPER_CASE settings of plain types."""
    plain = (bool, int, float, str, type(None))
    lines = [
        f"{name} = {value!r}"
        for name, value in namespace.items()
        if _SETTING.match(name) and isinstance(value, plain)
    ]
    return "\n".join([*lines, "NODE_RANK = 1"])


def also_in_second_kernel(line: str, cell: str) -> None:
    """Run the cell in a second kernel as machine 1 (in the background), then here.

    The second kernel gets this notebook's UPPER_CASE settings of plain types and
    ``NODE_RANK = 1``. When the cell is done, its output is printed with a ``[machine 1]``
    prefix and the kernel is shut down. With ``PLAY_MACHINE_1_HERE = False`` in the notebook
    the cell only runs here, which is what each real machine does.
    """
    # IPython is there only in a notebook (the notebook extra)
    from IPython import get_ipython

    shell = get_ipython()
    if not shell.user_ns.get("PLAY_MACHINE_1_HERE", True):
        shell.run_cell(cell)
        return
    print("Starting a second kernel on this machine to play machine 1 (NODE_RANK = 1) ...")
    machine1 = SecondKernel()
    try:
        msg_id = machine1.submit(_settings(shell.user_ns) + "\n" + cell)
        result = shell.run_cell(cell)
        output, error = machine1.collect(msg_id)
    finally:
        machine1.shutdown()
    print("".join(f"[machine 1] {text}\n" for text in output.splitlines()), end="")
    if error:
        raise RuntimeError(f"the cell failed in the second kernel (machine 1): {error}")
    result.raise_error()


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%also_in_second_kernel`` (``%load_ext nbaccel.examples.second_kernel``)."""
    ipython.register_magic_function(also_in_second_kernel, "cell", "also_in_second_kernel")
