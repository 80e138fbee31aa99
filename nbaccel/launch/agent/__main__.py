"""``python -m nbaccel.launch.agent``: what each host of ``hosts=`` runs."""

from __future__ import annotations

from .main import leave, main

if __name__ == "__main__":
    leave(main())
