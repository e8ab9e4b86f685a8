"""``python -m tools.bench``: see :mod:`tools.bench.run`."""

import sys

from .run import main

sys.exit(main())
