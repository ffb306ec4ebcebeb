"""What one layer's exact model costs before the backend searches: estimated before it is built.

The backends' own time limits bound their search; building the model (Python objects, one
per placement variable ``z[e, c, g]``) and handing it over are not interrupted by them. The
driver (:mod:`.driver`) therefore estimates each layer's build from the model's size
(:attr:`.model.LayerModel.placement_variables`) before building it, plans the layers that
fit the time limit, and builds each against one deadline (the builders read the clock
between experts and stop with :class:`~solvers.clock.TimeUp`): a layer whose model would
not fit keeps its warm start, and the result says "model not built in time".

Seconds per placement variable on the reference machine (2 cores), measured on the joint
model in time of 4 layers x 64 experts, 80 slots, 2 x 8 GPUs of speeds 1 and 1.4 (15,000-
17,000 placement variables a layer; ``python -m benchmarks.exact_time_limits`` times the
whole solves):

- cpsat: variables, rows and the complete hint through OR-Tools' Python layer, 35-75 us,
  and CP-SAT's overshoot past its own limit, which grows with the model (loading it before
  it first reads its clock: 1.3 s on 197,000 placement variables of a DeepSeek-V3 layer
  against a limit of 0.05 s; 4.2 s past a 6.5 s limit on 253,000 at load 13: 15 us each),
  kept back from the deadline before the search and from CP-SAT's own limit;
- highs: PuLP's objects (25-45 us) and the array hand-over to highspy (about 15 us);
- cbc: PuLP's objects, the MPS file PuLP writes (60 us) and what CBC does before it first
  reads its clock (reading the file, preprocessing, the root LP: 1.5 s on 15,000 variables,
  100 us each); none of the last two can be interrupted, so :func:`handover_seconds` is
  checked against the deadline before they start.

The replication model has E x counts binaries and no placement: its cost is per candidate.
HiGHS's presolve, which checks its clock only between passes, is estimated from the same
size (4 s on 87,000 nonzeros, 5 per placement variable) and switched off when it would eat
the layer's time.
"""
from __future__ import annotations

from .model import LayerModel

# Seconds per placement variable (the replication model: per count candidate), 2 cores:
# building the model in Python, and handing it to the backend up to its first clock check.
BUILD_SECONDS_PER_VARIABLE = {"cpsat": 4e-5, "highs": 3e-5, "cbc": 3e-5}
HANDOVER_SECONDS_PER_VARIABLE = {"cpsat": 1.5e-5, "highs": 1.5e-5, "cbc": 1.6e-4}
# Fixed cost of one backend call (model object, solver start-up, reading the answer).
BUILD_SECONDS_FIXED = {"cpsat": 0.005, "highs": 0.01, "cbc": 0.05}
# HiGHS presolve, seconds per placement variable (about 5 nonzeros each).
PRESOLVE_SECONDS_PER_VARIABLE = 2.5e-4

# The message of a layer (and of a solve) whose model did not fit the time limit.
NOT_BUILT = "model not built in time"


def model_size(lm: LayerModel) -> int:
    """Variables the layer's model creates one by one in Python: placement variables, or the
    count candidates of the replication model."""
    if lm.replication_only:
        return sum(len(c) for c in lm.cand)
    return lm.placement_variables


def build_seconds(lm: LayerModel, backend: str) -> float:
    """Estimated seconds to build ``lm``'s model for ``backend`` and hand it over (2 cores)."""
    return (BUILD_SECONDS_FIXED[backend] + BUILD_SECONDS_PER_VARIABLE[backend] * model_size(lm)
            + handover_seconds(lm, backend))


def handover_seconds(lm: LayerModel, backend: str) -> float:
    """Estimated seconds between the built model and the backend's first look at its clock."""
    return HANDOVER_SECONDS_PER_VARIABLE[backend] * model_size(lm)


def presolve_seconds(lm: LayerModel) -> float:
    """Estimated seconds of HiGHS's presolve on ``lm``'s model (0 for the replication model)."""
    return 0.0 if lm.replication_only else PRESOLVE_SECONDS_PER_VARIABLE * lm.placement_variables
