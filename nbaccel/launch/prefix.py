"""The prefix before each line of a rank's output (``log_line_prefix_template``, torchrun's)."""

from __future__ import annotations

import string

__all__ = [
    "DEFAULT_PREFIX_TEMPLATE",
    "HOSTS_PREFIX_TEMPLATE",
    "PREFIX_PLACEHOLDERS",
    "format_prefix",
    "validate_prefix_template",
]

DEFAULT_PREFIX_TEMPLATE = "[rank${rank}]: "
# the default of a launch on other machines (hosts=[...]): the host comes first
HOSTS_PREFIX_TEMPLATE = "[${host} rank${rank}]: "


PREFIX_PLACEHOLDERS = ("rank", "local_rank", "node_rank", "role_name", "host")


def _allowed_text() -> str:
    return ", ".join("${" + name + "}" for name in PREFIX_PLACEHOLDERS)


def validate_prefix_template(template: object) -> None:
    """Check a ``log_line_prefix_template`` before anything is started.

    Args:
        template: A ``string.Template`` string using ``${rank}``, ``${local_rank}``,
            ``${node_rank}`` and ``${role_name}`` (torchrun's names) and ``${host}`` (the
            machine's ``hosts=`` entry; empty on this machine), or None for the default.

    Raises:
        TypeError: If ``template`` is neither a str nor None.
        ValueError: If it names an unknown placeholder or has a malformed ``$``.
    """
    if template is None:
        return
    if not isinstance(template, str):
        raise TypeError(
            f"log_line_prefix_template must be a str or None, not {type(template).__name__}; "
            f"it may use the placeholders {_allowed_text()}"
        )
    sample = dict.fromkeys(PREFIX_PLACEHOLDERS, "0")
    try:
        string.Template(template).substitute(sample)
    except KeyError as err:
        raise ValueError(
            f"log_line_prefix_template {template!r} uses the unknown placeholder "
            f"${{{err.args[0]}}}; allowed placeholders: {_allowed_text()} (write $$ for a "
            "literal $)"
        ) from None
    except ValueError as err:
        raise ValueError(
            f"log_line_prefix_template {template!r} is malformed ({err}); allowed "
            f"placeholders: {_allowed_text()} (write $$ for a literal $)"
        ) from None


def format_prefix(
    template: str | None,
    *,
    rank: int,
    local_rank: int,
    node_rank: int = 0,
    role_name: str = "default",
    host: str = "",
) -> str:
    """Build the prefix put before every line of one rank.

    Args:
        template: ``log_line_prefix_template``; None means ``DEFAULT_PREFIX_TEMPLATE``.
        rank: Global rank.
        local_rank: Rank on this node.
        node_rank: Rank of this node.
        role_name: Role name (torchrun's ``role_name``).
        host: The machine's ``hosts=`` entry (a launch on other machines), else empty.

    Returns:
        The prefix, e.g. ``"[rank1]: "``.

    Raises:
        TypeError: If ``template`` is neither a str nor None.
        ValueError: If ``template`` is malformed or names an unknown placeholder.
    """
    validate_prefix_template(template)
    default = HOSTS_PREFIX_TEMPLATE if host else DEFAULT_PREFIX_TEMPLATE
    chosen = default if template is None else template
    return string.Template(chosen).substitute(
        rank=rank, local_rank=local_rank, node_rank=node_rank, role_name=role_name, host=host
    )
