"""Fork launches in a kernel that shows every warning: the kernel survives, warnings still work.

On ipykernel 6 (Colab, Kaggle) objects of the kernel's zmq machinery die in a forked child
during ``os.fork()`` itself and raise ``ResourceWarning``; printed through the kernel's
inherited stream, such a warning touched the parent's zmq context from the child and aborted
the whole kernel (``Assertion failed: ok (src/mailbox.cpp:99)``) in most launches. The tier runs
this on the newest ipykernel and, in the "colab" tier, on Colab's ipykernel 6.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from tests.support.kernel import running_kernel

pytestmark = pytest.mark.notebook

_SETUP = """
import threading, warnings
warnings.simplefilter("always")  # as while debugging: every warning, ResourceWarning too
from nbaccel import notebook_launcher

def warn_and_return(n):
    warnings.warn(f"rank's own warning {n}", ResourceWarning)
    return n
"""
_OWN_WARNING = re.compile(r"^\[rank([01])\]: .*ResourceWarning: rank's own warning (\d)$", re.M)


@pytest.mark.timeout(240)
def test_fork_launches_survive_a_kernel_that_shows_every_warning() -> None:
    with running_kernel() as kernel:
        kernel.ok(_SETUP)
        for n in range(4):
            # a kernel thread that printed holds its own output socket on ipykernel 6
            kernel.ok("threading.Thread(target=print, args=('from a thread',)).start()")
            cell = kernel.execute(
                f'print("RESULT", notebook_launcher(warn_and_return, ({n},), num_processes=2, '
                'start_method="fork"))',
                timeout=90,
            )  # raises KernelDied if the kernel aborted
            assert cell.status == "ok", cell.describe()
            assert f"RESULT [{n}, {n}]" in cell.stdout, cell.describe()
            # the workers' own warnings still show, through the relay, and nothing of the
            # kernel's machinery does (the kernel may warn about its own sockets itself)
            warned = sorted(_OWN_WARNING.findall(cell.stderr))
            assert warned == [("0", str(n)), ("1", str(n))], cell.describe()
            workers = [line for line in cell.lines("stderr") if line.startswith("[rank")]
            assert not [line for line in workers if "zmq" in line.lower()], cell.describe()
        assert kernel.value("1 + 1") == "2"
