"""Checkpoint directories: file names, automatic naming, and publishing a directory atomically.

A checkpoint is written into a hidden staging directory next to its final place
(``.checkpoint_3.staging-<token>``) and renamed into place once every file is written and
flushed to the disk (each file and each directory ``fsync``ed before the rename, the parent
directory after it), so a directory under its final name is always complete, also after a
power cut. ``checkpoint.json`` (the manifest) lists every file with its size; loading checks
it first.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "MANIFEST_NAME",
    "atomic_file",
    "checkpoint_dirs",
    "fsync_dir",
    "fsync_fds",
    "fsync_file",
    "fsync_tree",
    "in_staging",
    "make_dirs",
    "model_file",
    "numbered",
    "partial_name",
    "publish",
    "read_manifest",
    "remove_stale_staging",
    "remove_tree",
    "settle",
    "staging_dir",
    "verify_manifest",
    "write_manifest",
]

MANIFEST_NAME = "checkpoint.json"
FORMAT = "nbaccel-checkpoint"
_CHECKPOINT = re.compile(r"checkpoint_(\d+)")
_RENAME_EXCHANGE = 2  # linux/fs.h
_STAGING = re.compile(r"\..+\.staging-[0-9a-f]+")
logger = logging.getLogger(__name__)


def numbered(name: str, index: int, extension: str) -> str:
    """``name.ext`` for index 0, ``name_{i}.ext`` after (Accelerate's names)."""
    return f"{name}.{extension}" if index == 0 else f"{name}_{index}.{extension}"


def model_file(index: int, safe_serialization: bool) -> str:
    """The file of the ``index``-th model in a state checkpoint."""
    if safe_serialization:
        return numbered("model", index, "safetensors")
    return numbered("pytorch_model", index, "bin")


def checkpoint_dirs(root: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Complete automatic checkpoints under ``root`` (``checkpoint_{i}``), oldest first.

    Staging directories never match (their names start with a dot), and a directory counts
    only with its manifest, so a save that was cut short is never listed.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        match = _CHECKPOINT.fullmatch(entry.name)
        if match and (entry / MANIFEST_NAME).is_file():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def remove_tree(path: Path) -> None:
    """Delete an old checkpoint: renamed aside first, so it never looks half there."""
    hidden = path.parent / f".{path.name}.old-{secrets.token_hex(6)}"
    os.rename(path, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


def staging_dir(target: Path, token: str) -> Path:
    """The hidden directory a save to ``target`` writes into before it is renamed."""
    return target.parent / f".{target.name}.staging-{token}"


def in_staging(path: Path) -> bool:
    """Whether ``path`` lies inside a staging directory (flushed as a whole when published)."""
    return any(_STAGING.fullmatch(parent.name) for parent in path.parents)


def remove_stale_staging(target: Path, keep: Path | None = None) -> None:
    """Delete what earlier, interrupted saves to ``target`` left behind (except ``keep``),
    with a warning naming each directory removed."""
    if not target.parent.is_dir():
        return
    prefixes = (f".{target.name}.staging-", f".{target.name}.old-")
    for entry in sorted(target.parent.iterdir()):
        if entry.name.startswith(prefixes) and entry != keep:
            logger.warning(
                "Removing %s: an earlier save to %s was interrupted and left it behind "
                "(the checkpoint it was writing was never published).",
                entry,
                target,
            )
            shutil.rmtree(entry, ignore_errors=True)


def fsync_file(path: Path) -> None:
    """Flush ``path``'s data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_fds(fds: list[int]) -> None:
    """``fsync`` open files, several at once (each waits on the disk, not on the CPU)."""
    if len(fds) <= 1:
        for fd in fds:
            os.fsync(fd)
        return
    with concurrent.futures.ThreadPoolExecutor(min(4, len(fds)), "nbaccel-fsync") as pool:
        for future in [pool.submit(os.fsync, fd) for fd in fds]:
            future.result()


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries (renames, new files) to the disk, where the OS allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(directory: Path) -> None:
    """Flush every file under ``directory`` (whoever wrote it: hooks, DCP, other ranks), then
    every directory, deepest first, ``directory`` itself last. Files already flushed by their
    writer cost one system call each."""
    files: list[Path] = []
    directories: list[Path] = []
    for root, _, names in os.walk(directory):
        directories.append(Path(root))
        files += [Path(root, name) for name in names]
    fds = [os.open(path, os.O_RDONLY) for path in files]
    try:
        fsync_fds(fds)
    finally:
        for fd in fds:
            os.close(fd)
    for path in reversed(directories):
        fsync_dir(path)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories atomically (Linux ``renameat2``); False where unavailable."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    result = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    return bool(result == 0)


def publish(staging: Path, target: Path, token: str) -> None:
    """Flush ``staging`` to the disk and rename it to ``target``; an existing ``target`` is
    replaced atomically. The parent directory is flushed after the rename.

    Where the OS cannot swap two directories, the old ``target`` is first renamed aside, so
    an interruption leaves it as ``.{name}.old-{token}`` next to the new one.
    """
    if staging.exists():
        fsync_tree(staging)
    if not target.exists():
        try:
            os.rename(staging, target)
        except FileNotFoundError:  # another node's main process renamed a shared directory
            if not target.exists():
                raise
        fsync_dir(target.parent)
        return
    if not staging.exists():  # shared file system: already published by another node
        return
    if _exchange(staging, target):
        fsync_dir(target.parent)
        shutil.rmtree(staging)  # it now holds the old checkpoint
    else:
        old = target.parent / f".{target.name}.old-{token}"
        os.rename(target, old)
        os.rename(staging, target)
        fsync_dir(target.parent)
        shutil.rmtree(old, ignore_errors=True)
    fsync_dir(target.parent)


def write_manifest(directory: Path, info: dict[str, Any]) -> None:
    """List every file of ``directory`` with its size in ``checkpoint.json``."""
    files = {
        str(p.relative_to(directory)): p.stat().st_size
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != MANIFEST_NAME
    }
    manifest = {"format": FORMAT, "version": 1, **info, "files": files}
    path = directory / MANIFEST_NAME
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of ``directory`` (None when the checkpoint has none)."""
    path = directory / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(
            f"The checkpoint manifest {path} cannot be read ({error}); the checkpoint is "
            "damaged. Load an earlier checkpoint."
        ) from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not an nbaccel checkpoint manifest.")
    return manifest


def verify_manifest(directory: Path, manifest: dict[str, Any], names: list[str]) -> None:
    """Check that each of ``names`` listed in the manifest is there with its recorded size."""
    files: dict[str, int] = manifest.get("files", {})
    for name in names:
        if name not in files:
            continue
        path = directory / name
        if not path.exists():
            raise FileNotFoundError(
                f"The checkpoint file {path} is missing (the checkpoint's manifest lists it). "
                "The checkpoint was damaged after it was written; load an earlier one."
            )
        size = path.stat().st_size
        if size != files[name]:
            raise ValueError(
                f"The checkpoint file {path} is corrupt: it has {size} bytes, but "
                f"{files[name]} were written. Load an earlier checkpoint."
            )


def partial_name(path: Path) -> Path:
    """The hidden name ``path`` is written under before it is renamed into place."""
    return path.parent / f".{path.name}.partial-{os.getpid()}"


def settle(path: Path) -> None:
    """After a file was renamed to ``path``: flush its directory's entry, unless ``path`` is
    inside a staging directory (flushed as a whole before it is published)."""
    if not in_staging(path):
        fsync_dir(path.parent)


def make_dirs(directory: Path) -> None:
    """``mkdir -p directory``, each directory it creates flushed into its parent."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        fsync_dir(created.parent)


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """Yield a temporary name next to ``path``; when the block succeeds, its file is flushed
    to the disk, renamed to ``path`` and the directory entry flushed (see :func:`settle`)."""
    temporary = partial_name(path)
    try:
        yield temporary
        fsync_file(temporary)
        os.replace(temporary, path)
        settle(path)
    finally:
        if temporary.exists():
            temporary.unlink()
