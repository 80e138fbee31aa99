"""``python -m nbaccel``: the same as the ``nbaccel`` command."""

import sys

from .cli.main import main

sys.exit(main())
