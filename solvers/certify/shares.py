"""How ``certify`` shares its time limit among its phases: the one table every phase reads.

The heuristic portfolio first gets ``heuristic_share`` of the time limit (the solver's
option, default 0.2; under the hierarchical policy the group-to-node assignment plan gets
that share again). The time left is then shared equally over the layers still to solve,
and each layer's span is cut into phases. A phase runs until its *end*: a cumulative
fraction of the layer's span measured from the layer's start (so ``lp_bound=0.4`` means
"the LP bisection runs until 40 % of the layer's time"); the last phase runs to the end of
the layer. docs/certify.md explains why these numbers (and
docs/notes/2026-11-23-certify-results.md what they gave).

Two slots per GPU, global policy (:data:`TWO_SLOTS` below :data:`WINDOW_FROM_EXPERTS`
experts, :data:`TWO_SLOTS_LARGE` from there on):
count search -> LP bound -> window search (large only) -> neighbourhoods (LNS) ->
exact bisection -> neighbourhoods again for the rest when the bisection proved nothing.

Other slot counts, hierarchical policy (:data:`NODE_PHASES`): two-GPU re-splits ->
three-GPU re-splits -> count moves -> residue design of the busiest node -> CP-SAT
repack of that node for the rest. (Global policy: every re-split phase may use the whole
layer, in turn; no shares.)

Inside phases: :data:`WINDOW_CALL_SHARE` of the layer's span (at least
:data:`WINDOW_CALL_MIN_S` seconds) per window-search call, at most :data:`LNS_CALL_MAX_S`
seconds per neighbourhood, :data:`DEEP_PROBE_SHARE` of the time left for a deep probe of
the exact bisection (a proof gets all of it), and :data:`RESIDUE_ATTEMPT_SHARE` of the
time left (at least :data:`RESIDUE_ATTEMPT_MIN_S` s) per residue-design target.
"""
from __future__ import annotations

from dataclasses import dataclass

# At two slots per GPU, the window search runs from this many experts on (fewer: the exact
# bisection gets its time instead).
WINDOW_FROM_EXPERTS = 64


@dataclass(frozen=True)
class TwoSlotPhases:
    """Ends of the phases at two slots per GPU (cumulative fractions of a layer's span)."""

    count_search: float
    lp_bound: float
    window_search: float | None        # None: no window search
    neighbourhoods: float
    exact_bisection: float             # then neighbourhoods again, to the layer's end


@dataclass(frozen=True)
class NodePhases:
    """Ends of the phases of the hierarchical re-split path (cumulative fractions)."""

    polish: float                      # two-GPU re-splits within the node
    polish_three: float                # three-GPU re-splits
    count_moves: float
    residues: float                    # residue design of the busiest node; CP-SAT repack to the end


# Below 64 experts the exact bisection proves optima in seconds and gets more time; from 64
# on CP-SAT rarely decides the full model near the optimum and the window search gains most
# (128 experts at 288 slots, 4 s a layer).
TWO_SLOTS = TwoSlotPhases(count_search=0.2, lp_bound=0.4, window_search=None, neighbourhoods=0.7,
                          exact_bisection=0.9)
TWO_SLOTS_LARGE = TwoSlotPhases(count_search=0.1, lp_bound=0.2, window_search=0.65, neighbourhoods=0.75,
                                exact_bisection=0.9)
NODE_PHASES = NodePhases(polish=0.2, polish_three=0.3, count_moves=0.45, residues=0.95)

WINDOW_CALL_SHARE, WINDOW_CALL_MIN_S = 0.1, 0.5
LNS_CALL_MAX_S = 10.0
DEEP_PROBE_SHARE = 0.5
RESIDUE_ATTEMPT_SHARE, RESIDUE_ATTEMPT_MIN_S = 0.5, 2.0


def two_slot_phases(num_experts: int) -> TwoSlotPhases:
    """The two-slot phases for a layer of ``num_experts`` experts."""
    return TWO_SLOTS_LARGE if num_experts >= WINDOW_FROM_EXPERTS else TWO_SLOTS
