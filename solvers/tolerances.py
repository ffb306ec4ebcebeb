"""Every numerical tolerance used to compare objectives with bounds, in one place.

All comparisons are *relative*: loads arrive as token counts (up to about 1e9 per layer)
or normalised (about 1e-3), and an absolute slack would call a 20 % gap "optimal" on the
latter. A layer is proven optimal when ``objective <= bound * (1 + BOUND_RTOL)``.
"""

# Objective meets bound: plan proven optimal (float64 rounding of sums of a few hundred
# terms is far below this; a MIP's own gap tolerance is discounted from its bound first).
BOUND_RTOL = 1e-6

# An objective below ``bound * (1 - VIOLATION_RTOL)`` means a solver or a bound is wrong.
VIOLATION_RTOL = 1e-6
