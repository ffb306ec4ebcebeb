"""Every numerical tolerance used to compare objectives with bounds, in one place.

All comparisons are *relative*: loads arrive as token counts (up to about 1e9 per layer)
or normalised (about 1e-3), and an absolute slack would call a 20 % gap "optimal" on the
latter. A layer is proven optimal when ``objective <= bound * (1 + BOUND_RTOL)``.

Exact backends never see the caller's units: each layer's loads are multiplied by a power
of two (exact in float64) so that its reference load lands in
``[SCALED_LOAD_TARGET, 2 * SCALED_LOAD_TARGET)`` (see :mod:`solvers.exact.scaling`), and
every backend tolerance below is stated in those scaled units.
"""

# Objective meets bound: plan proven optimal (float64 rounding of sums of a few hundred
# terms is far below this; a MIP's own gap tolerance is discounted from its bound first).
BOUND_RTOL = 1e-6

# Relative differences below this are float64 rounding of sums taken in another order (a gap
# of 2.2e-16, an off-node share of 7.7e-18), not a real gap or share: reported as 0.
ROUNDING_RTOL = 1e-12

# An objective below ``bound * (1 - VIOLATION_RTOL)`` means a solver or a bound is wrong.
VIOLATION_RTOL = 1e-6

# Reference load of a layer (max of the mean GPU load and the hottest expert) after
# scaling. MIP solvers' absolute tolerances (1e-6 to 1e-9) are then 1e-9 to 1e-12 of it.
SCALED_LOAD_TARGET = 1024.0

# A MIP backend's proven bound is taken down by this much (scaled units, absolute) for its
# row feasibility tolerance (HiGHS and CBC default to 1e-7; 1e-6 covers a GPU row of
# a few dozen terms each within tolerance) ...
MIP_BOUND_ABS_DISCOUNT = 1e-6
# ... and by this share of itself, for the backend's float arithmetic.
MIP_BOUND_REL_DISCOUNT = 1e-9

# CP-SAT needs integer coefficients: a scaled layer's GPU load is about this many units,
# and floored coefficients keep the model's optimum within S / 1e9 (relative) of the truth.
CPSAT_LOAD_UNITS = 1e9
# Integer token counts keep exact coefficients (scaled by the lcm of candidate counts)
# while the scaled total stays below this.
CPSAT_EXACT_LIMIT = 2**40
