"""One "machine" of the multi-node bed: a real Jupyter kernel inside a network namespace.

Run as ``ip netns exec NS python machine_kernel.py DISK``: it starts an ipykernel in the
namespace (so the kernel and the workers it launches see only that namespace's network), then
reads one JSON request per line on stdin (``{"code": ..., "timeout": ...}``), runs the code as
a cell, and answers one JSON line on stdout with the cell's streams and error. The Jupyter
connection stays on the namespace's own loopback, which the test process cannot reach; this
driver is the test's hand inside the machine.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from jupyter_client.manager import KernelManager

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _run(client: Any, manager: KernelManager, code: str, timeout: float) -> dict[str, Any]:
    streams: dict[str, list[str]] = {"stdout": [], "stderr": []}
    answer: dict[str, Any] = {"error": None, "status": "ok"}

    def hook(message: dict[str, Any]) -> None:
        kind, content = message["msg_type"], message["content"]
        if kind == "stream":
            streams[content["name"]].append(content["text"])
        elif kind == "error":
            trace = _ANSI.sub("", "\n".join(content["traceback"]))
            answer["error"] = {
                "ename": content["ename"],
                "evalue": content["evalue"],
                "traceback": trace,
            }
        elif kind in ("execute_result", "display_data"):
            streams["stdout"].append(content["data"].get("text/plain", "") + "\n")

    try:
        reply = client.execute_interactive(code, timeout=timeout, output_hook=hook)
        answer["status"] = reply["content"]["status"]
    except TimeoutError:
        manager.interrupt_kernel()
        answer["status"] = "timeout"
    answer.update({name: "".join(parts) for name, parts in streams.items()})
    return answer


def main() -> int:
    disk = sys.argv[1]
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=disk)
    client = manager.blocking_client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            answer = _run(client, manager, request["code"], float(request["timeout"]))
            print(json.dumps(answer), flush=True)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
