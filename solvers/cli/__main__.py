"""``python -m solvers.cli``: the ``eplb`` command."""
import sys

from . import main

sys.exit(main())
