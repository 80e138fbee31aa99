"""What each rank of ``nbaccel launch --hosts`` runs: the script as it is on this machine.

The script's text travels with the launch (in the pickled task), so a script that exists only
on the machine that runs ``nbaccel launch`` runs on every host, and every rank runs the same
text even where a host has an older copy at the same path. On the host the rank runs it as
``python script.py args`` would: ``__name__ == "__main__"``, ``__file__`` and ``sys.argv[0]``
the script's path on this machine, ``sys.argv[1:]`` its arguments, the script's directory first
on ``sys.path`` (so modules beside it import where that directory exists on the host too);
tracebacks show its lines. What the script imports and reads (modules beside it, data files)
must be on the hosts. ``-m package.module`` runs the host's module, as ``python -m`` there.
"""

from __future__ import annotations

import ast
import dataclasses
import linecache
import os
import runpy
import sys
import tempfile
import types
from pathlib import Path

from ..environment import set_config_file_override
from ..validation import is_int

__all__ = ["ScriptJob", "entry_function", "has_main_guard", "run_script", "script_job"]


def has_main_guard(tree: ast.Module) -> bool:
    """True when the script's top level has an ``if __name__ == ...:`` of its own."""
    for node in tree.body:
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            return True
    return False


def entry_function(tree: ast.Module, function: str) -> str | None:
    """``function`` (``main_training_function``) where the script defines it at the top level
    and has no ``if __name__ == "__main__":`` to call it: the launcher calls it after the
    script's top level ran. None otherwise."""
    defines = any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function
        for n in tree.body
    )
    return function if defines and not has_main_guard(tree) else None


@dataclasses.dataclass(frozen=True)
class ScriptJob:
    """One script run, as every rank receives it.

    Attributes:
        target: the script's absolute path on this machine, or the module's name.
        args: the script's arguments.
        module: ``target`` is a module (``-m``), run from the host's own installation.
        source: the script's text (empty for a module).
        call: the function to call after the top level ran (see :func:`entry_function`).
        config_text: the resolved config file (YAML) the script's ``Accelerator()`` reads.
    """

    target: str
    args: tuple[str, ...]
    module: bool = False
    source: str = ""
    call: str | None = None
    config_text: str = ""


def script_job(
    script: str, args: list[str], module: bool, function: str, config_text: str
) -> ScriptJob:
    """The job for ``script`` (read here, now).

    Raises:
        SystemExit: the script does not exist, or cannot be read.
    """
    if module:
        return ScriptJob(script, tuple(args), module=True, config_text=config_text)
    path = Path(script)
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"nbaccel launch: no such script: {script} ({exc})") from None
    try:
        call = entry_function(ast.parse(source, str(path)), function)
    except SyntaxError:
        call = None  # each rank raises it, with the usual traceback
    target = str(path.resolve())
    return ScriptJob(target, tuple(args), source=source, call=call, config_text=config_text)


def run_script(job: ScriptJob) -> None:
    """Run ``job`` in this rank (see the module docstring); a ``SystemExit`` other than 0 and
    an exception end the rank as they end ``python script.py``."""
    with tempfile.TemporaryDirectory(prefix="nbaccel-script-") as tmp:
        config = Path(tmp, "resolved_config.yaml")
        config.write_text(job.config_text)
        set_config_file_override(str(config))  # what nbaccel launch's processes read
        sys.argv = [job.target, *job.args]
        if job.module:
            runpy.run_module(job.target, run_name="__main__", alter_sys=True)
            return
        _run_source(job)


def _run_source(job: ScriptJob) -> None:
    name = "__main__" if job.call is None else "__nbaccel_script__"
    sys.path.insert(0, os.path.dirname(job.target))
    lines = job.source.splitlines(True)
    linecache.cache[job.target] = (len(job.source), None, lines, job.target)
    code = compile(job.source, job.target, "exec")
    main = types.ModuleType(name)
    main.__file__ = job.target
    previous = sys.modules.get(name)
    sys.modules[name] = main  # pickle and dataclasses look the script's names up there
    try:
        exec(code, main.__dict__)
        if job.call is not None:
            result = main.__dict__[job.call]()
            if is_int(result) and result:
                raise SystemExit(result)
    finally:
        if previous is not None:
            sys.modules[name] = previous
