"""``python -m benchmarks.run ...`` from a checkout: the harness's runner, ``solvers.bench.run``
(installed as ``eplb bench run ...``)."""
import sys

from solvers.bench.run import main

if __name__ == "__main__":
    sys.exit(main())
