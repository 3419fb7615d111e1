"""``python -m orion.cli ...``: the ``orion`` command."""

import sys

from . import main

sys.exit(main())
