"""Are all the shards of a sharded checkpoint here? (machines that share no file system)"""

from __future__ import annotations

from pathlib import Path

__all__ = ["require_every_shard"]


def require_every_shard(checkpoint_dir: Path) -> None:
    """Raise a clear error when shard files listed in ``.metadata`` are not in the directory.

    Each rank writes its shard on its own machine; without a shared file system the shards
    of the other machines are on their disks, not here.

    Raises:
        FileNotFoundError: naming the missing shards and how to gather them.
    """
    from .safe_dcp import SafeReader  # never plain pickle: .metadata may be crafted

    try:
        metadata = SafeReader(str(checkpoint_dir)).read_metadata()
    except Exception:
        return  # an unreadable .metadata is reported by the loader itself
    storage = getattr(metadata, "storage_data", None) or {}
    needed = {str(getattr(info, "relative_path", "")) for info in storage.values()}
    missing = sorted(name for name in needed if name and not (checkpoint_dir / name).exists())
    if missing:
        raise FileNotFoundError(
            f"merge_fsdp_weights: {checkpoint_dir} lacks the shard file(s) {', '.join(missing)}: "
            "the ranks that wrote them ran on other machines, which do not share a file system "
            "with this one. Copy those files from the same directory on every machine into "
            f"{checkpoint_dir} (e.g. `rsync -a other-machine:{checkpoint_dir}/ "
            f"{checkpoint_dir}/`), then merge again; or save to a shared file system."
        )
