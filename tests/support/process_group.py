"""A process group of one without a launcher, for FSDP in a plain script (the faults tier's
durability target, the gpu tier's checks)."""

from __future__ import annotations

import os
import socket


def single_process_job() -> None:
    """Set the variables torchrun sets for a job of one process (FSDP needs a process group)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip
