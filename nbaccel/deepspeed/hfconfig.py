"""``HfDeepSpeedConfig``: a DeepSpeed configuration read from a dict, a JSON file or base64
text, with dotted-key look-ups ("zero_optimization.stage") and the ZeRO stage and offload
questions Accelerate's and Transformers' code ask of it."""

from __future__ import annotations

import base64
import copy
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["HfDeepSpeedConfig"]


def _load(config_file_or_dict: Any) -> dict[str, Any]:
    if isinstance(config_file_or_dict, dict):
        return copy.deepcopy(config_file_or_dict)  # never change the caller's dict
    if isinstance(config_file_or_dict, (str, os.PathLike)):
        path = Path(config_file_or_dict).expanduser()
        try:
            is_file = path.is_file()
        except OSError:  # base64 text longer than a file name may be
            is_file = False
        if is_file:
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"The DeepSpeed config file {path} is not valid JSON: {exc}."
                ) from exc
        else:
            try:
                loaded = json.loads(base64.urlsafe_b64decode(str(config_file_or_dict)))
            except (ValueError, UnicodeDecodeError):
                raise FileNotFoundError(
                    f"The DeepSpeed config {str(config_file_or_dict)!r} is neither a file that "
                    "exists nor base64-encoded JSON; give the path of a JSON file or a dict."
                ) from None
        if not isinstance(loaded, dict):
            raise ValueError(
                f"The DeepSpeed config {str(config_file_or_dict)!r} must hold a JSON object, "
                f"not a {type(loaded).__name__}."
            )
        return loaded
    raise TypeError(
        "hf_ds_config must be a dict, the path of a JSON file or an HfDeepSpeedConfig, got "
        f"{type(config_file_or_dict).__name__}."
    )


class HfDeepSpeedConfig:
    """A DeepSpeed configuration (``config``) and questions about it.

    Args:
        config_file_or_dict: a dict (copied), the path of a JSON file, or base64-encoded JSON.
    """

    def __init__(self, config_file_or_dict: Any) -> None:
        self.config: dict[str, Any] = _load(config_file_or_dict)
        self.set_stage_and_offload()

    def set_stage_and_offload(self) -> None:
        """Read the ZeRO stage and whether anything is offloaded (after the config changed)."""
        self._stage = self.get_value("zero_optimization.stage", -1)
        self._offload = False
        if self.is_zero2() or self.is_zero3():
            devices = {
                self.get_value("zero_optimization.offload_optimizer.device"),
                self.get_value("zero_optimization.offload_param.device"),
            }
            self._offload = bool(devices & {"cpu", "nvme"})

    def find_config_node(self, ds_key_long: str) -> tuple[dict[str, Any] | None, str]:
        """The dict that holds the last part of a dotted key, and that part (None when a
        dict on the way is missing)."""
        config: Any = self.config
        *parents, ds_key = ds_key_long.split(".")
        for node in parents:
            config = config.get(node) if isinstance(config, dict) else None
            if config is None:
                return None, ds_key
        return (config if isinstance(config, dict) else None), ds_key

    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        """The value at a dotted key, or ``default``."""
        config, ds_key = self.find_config_node(ds_key_long)
        if config is None:
            return default
        return config.get(ds_key, default)

    def del_config_sub_tree(self, ds_key_long: str, must_exist: bool = False) -> None:
        """Remove the sub-tree at a dotted key."""
        config, ds_key = self.find_config_node(ds_key_long)
        if config is None or ds_key not in config:
            if must_exist:
                raise ValueError(f"Can't find {ds_key_long} entry in the config: {self.config}")
            return
        config.pop(ds_key)

    def is_true(self, ds_key_long: str) -> bool:
        """True when the key is set and true (False when it is missing)."""
        value = self.get_value(ds_key_long)
        return False if value is None else bool(value)

    def is_false(self, ds_key_long: str) -> bool:
        """True when the key is set and false (False when it is missing)."""
        value = self.get_value(ds_key_long)
        return False if value is None else not bool(value)

    def is_zero2(self) -> bool:
        return self._stage == 2

    def is_zero3(self) -> bool:
        return self._stage == 3

    def is_offload(self) -> bool:
        return self._offload
