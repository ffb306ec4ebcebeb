"""What the pages compute, as plain functions of tensors (no Streamlit; the pages cache them).

The sidebar's :class:`solvers.Cluster` and expert groups plus loads make a
:class:`solvers.Problem`; :func:`run_solver` is
:func:`solvers.solve` plus the gap within the plan's own policy; :func:`score_holdout` scores a
plan on loads it was not planned on. Tables for the pages come from :func:`metric_cards`,
:func:`plan_table` and :func:`compare_row`.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from solvers import Problem, SolveResult, lower_bound, score, solve
from solvers.compare import COLUMNS, TIME_COLUMNS, holdout_step_columns
from solvers.dispatch.microbatches import microbatch_imbalance as imbalance
from solvers.plan import Plan
from solvers.result import ratio_gap
from solvers.scoring import Score, per_slot_loads


@dataclass(frozen=True)
class Outcome:
    """A solve as the pages hold it: the SolveResult (plan graded by the shared scorer)."""

    result: SolveResult

    @property
    def gap_in_policy(self) -> torch.Tensor | None:
        """[L] gap against the bound for every plan of the plan's own node structure (None
        without a plan): :attr:`solvers.SolveResult.gap_in_policy`."""
        return self.result.gap_in_policy


def run_solver(problem: Problem, solver: str, options: dict[str, Any]) -> Outcome:
    """:func:`solvers.solve`, for the pages' cache."""
    return Outcome(solve(problem, solver, **options))


@dataclass(frozen=True)
class Holdout:
    """A plan scored on held-out loads: score, the bound valid there, and the gap [L];
    per_step: the plan scored on each held-out step in turn (what serving meets step by step),
    None for one step or a cluster of GPUs of different speeds."""

    score: Score
    lower_bound: torch.Tensor
    gap: torch.Tensor
    per_step: Score | None = None


def score_holdout(problem: Problem, plan: Plan, steps: torch.Tensor | None = None) -> Holdout:
    """Score ``plan`` on ``problem`` (loads it was not planned on) and its gap to the bound
    that holds for every plan on those loads. steps: [T, L, E] the held-out steps one by one
    (``problem`` holds their sum), scored as ``eplb compare --holdout`` does."""
    sc = score(problem, plan)
    lb = lower_bound(problem)
    per_step = None
    if steps is not None and steps.shape[0] > 1:                 # in time too on a real cluster
        per_step = score(problem, plan, tokens=steps)
    return Holdout(sc, lb, ratio_gap(sc.max_time, lb), per_step)


def _seconds(t: float) -> str:
    """A wall time in at most 8 characters (a metric card's width): 3.4 ms, 0.25 s, 12 s."""
    if t < 0.01:
        return f"{max(t * 1e3, 0.01):.2g} ms"
    return f"{t:.2g} s" if t < 10 else f"{t:.0f} s"


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.2f}%"


def worst_layer(result: SolveResult) -> int:
    """The layer with the largest imbalance: where Explore's layer views open."""
    return int(torch.argmax(result.score.imbalance))


def metric_cards(outcome: Outcome, moves: Score | None = None) -> list[tuple[str, str, str]]:
    """(label, value, help) of the Explore page's metric cards: numbers only, with short
    labels and values (a card is about 150 px wide at 1280 px; what the solver did is
    :func:`run_line`)."""
    r = outcome.result
    m = r.score.metrics()
    gap, gip = r.gap, outcome.gap_in_policy
    cards = [
        ("Imbalance", f"{m['imbalance_mean']:.4f}", "max GPU load / mean GPU load, averaged over layers (1 is perfect)"),
        ("Worst layer", f"{m['imbalance_worst']:.4f}", "the largest max / mean over layers"),
        ("Balancedness", f"{m['balancedness']:.4f}", "mean / max GPU load averaged over layers (what vLLM and SGLang log); "
                                                      f"sum form {m['balancedness_sum']:.4f}"),
        ("Node imbalance", f"{m['node_imbalance_mean']:.4f}", f"max / mean node load, mean over layers (worst "
                                                                f"{m['node_imbalance_worst']:.4f})"),
        ("Gap to bound", _pct(float(gap.mean())), f"objective / lower bound - 1, mean over layers (worst layer "
                                                   f"{_pct(float(gap.max()))}); the bound holds for every plan"),
        ("Gap in policy", _pct(None if gip is None else float(gip.mean())),
         "the same against the bound for every plan keeping this plan's node structure (for a hierarchical "
         "plan: whole groups per node); gap to bound minus this is what the policy costs"),
        ("Off-node share", _pct(m.get("off_node_share_mean")),
         "share of tokens served outside their group's home node (inter-node traffic proxy; - without groups)"),
        ("Duplicates", f"{m['duplicates']}", "(layer, GPU, expert) with two or more replicas on one GPU"),
        ("Time", _seconds(r.wall_time), "the solver's wall time"),
    ]
    if "time_imbalance_mean" in m:      # GPUs of different speeds: the objective is time
        cards.append(("Time imbalance", f"{m['time_imbalance_mean']:.4f}",
                      "max GPU time (load / speed) over the best possible time (W / total speed), mean over "
                      f"layers (worst {m['time_imbalance_worst']:.4f})"))
    if moves is not None and moves.moves is not None:
        size = "-" if moves.moves_bytes is None else f"{moves.moves_bytes / 1e9:,.1f} GB"
        cards.append(("Moves", f"{moves.moves:,}", "replicas a GPU must load because the current placement's GPU "
                                                   "did not hold that expert"))
        cards.append(("Moved", size, "moves x expert size"))
    return cards


def run_line(result: SolveResult) -> str:
    """What the solver did, in one markdown line: its policy, why it stopped (termination)
    and what the plan is worth (solution status)."""
    return (f"**{result.solver}** · policy **{result.policy}** · termination **{result.termination}** · "
            f"solution **{result.status}** · {result.wall_time:.3g} s")


def policy_hint(result: SolveResult, gap_in_policy: torch.Tensor | None) -> str | None:
    """A hint when most of the gap to the bound is what the hierarchical policy costs
    (whole groups per node): the bound holds for every plan, global ones included, so a
    hierarchical plan can sit far above it while near-optimal within its policy."""
    if result.policy != "hierarchical" or gap_in_policy is None or result.gap is None:
        return None
    gap, gip = float(result.gap.mean()), float(gap_in_policy.mean())
    if gap < 0.02 or gap - gip < 0.5 * gap:
        return None
    return (f"Most of the {100 * gap:.1f}% gap to the bound is the hierarchical policy's cost: within that policy "
            f"the gap is {100 * gip:.2f}%. Hierarchical keeps each expert group's replicas on one node (less "
            "inter-node traffic); set **policy** to global to plan without that restriction and see how close a "
            "global plan comes to the bound.")


# What the exact models can prove, from the shipped benchmark results (docs/bounds.md).
EXACT_SCALE = ("Exact models prove optima within seconds on small shapes (Mixtral-8x7B's 8 experts on 2 to 4 GPUs: "
               "the `node-2` and `nodes-2x2-nospare` presets); DeepSeek-V3 on 4 x 8 GPUs has about 74,000 "
               "placement variables per layer, more than a 10 s limit can build for 58 layers.")


def exact_report(result: SolveResult) -> list[str]:
    """What an exact (or bounded) solve did, as markdown lines: the library's message, per
    layer what the solver returned (its own solution, the warm start it began from), what it
    proved (optimal in its model, optimal for every plan, its model bound) and, when it
    proved little, why (the backend's reason)."""
    lines = []
    layers = (result.info or {}).get("layers") or []
    L = len(layers) if layers else (0 if result.score is None else result.score.imbalance.shape[0])
    if result.message:
        lines.append(f"**{result.solver}**: {result.message} (termination {result.termination}, "
                     f"{result.wall_time:.3g} s, options {options_text({k: v for k, v in result.options.items() if k in ('time_limit', 'model', 'policy')})}).")
    if layers:
        kinds = Counter(str(layer.get("solution", "?")) for layer in layers)
        text = ", ".join(f"{n} layer(s) {k.replace('_', ' ')}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        lines.append(f"Returned: {text} (warm start: the heuristic plan the model started from, unchanged).")
        reasons = Counter(str(layer["backend_status"]).split(":")[0] for layer in layers
                          if layer.get("backend_status") and layer.get("status") != "optimal")
        if reasons:
            why, n = max(reasons.items(), key=lambda kv: kv[1])
            example = next(str(x["backend_status"]) for x in layers if str(x.get("backend_status") or "").startswith(why))
            lines.append(f"Why, on {n} of {L} layer(s): {example}.")
    proven = 0 if result.proven_optimal is None else int(result.proven_optimal.sum())
    in_model = 0 if result.optimal_in_model is None else int(result.optimal_in_model.sum())
    proof = f"Proven: {proven} of {L} layer(s) optimal for every plan, {in_model} optimal within the solver's model"
    if result.model_bound is not None and result.score is not None and float(result.model_bound.max()) > 0:
        gim = result.gap_in_model
        proof += (f"; the model bound ({result.model_scope}) leaves a gap of {_pct(float(gim.mean()))} on average "
                  f"(the bound for every plan: {_pct(result.gap_mean)})")
    else:
        proof += "; no model bound proven (only the lower bound for every plan, from the bounds module)"
    lines.append(proof + ".")
    if proven + in_model < L:
        lines.append(EXACT_SCALE)
    return lines


def plan_table(weights: torch.Tensor, plan: Plan, layer: int, num_gpus: int, num_nodes: int,
               slot_gpus: list[int] | None = None) -> pd.DataFrame:
    """One layer of the plan, GPU by GPU: node, experts held (``e×k`` = k replicas), load,
    load / mean. weights: [L, E]. slot_gpus: the GPU of every slot (Cluster.slot_gpus();
    default R/P consecutive slots per GPU)."""
    p2l = plan.phy2log[layer].cpu()
    cnt = plan.logcnt[layer].cpu().to(torch.float64)
    w = weights[layer].cpu().to(torch.float64)
    R = p2l.shape[0]
    gpu_of = slot_gpus if slot_gpus is not None else [p // (R // num_gpus) for p in range(R)]
    per_slot = per_slot_loads(w, p2l, cnt)
    load = torch.zeros(num_gpus, dtype=torch.float64).index_add_(0, torch.tensor(gpu_of), per_slot)
    mean = float(load.mean()) or 1.0
    held = [Counter() for _ in range(num_gpus)]                     # GPU -> expert -> replicas
    for p, e in enumerate(p2l.tolist()):
        held[gpu_of[p]][e] += 1
    rows = []
    for g in range(num_gpus):
        text = ", ".join(f"{e}" if k == 1 else f"{e}×{k}" for e, k in sorted(held[g].items()))
        rows.append({"GPU": g, "node": g // (num_gpus // num_nodes), "experts": text,
                     "tokens": float(load[g]), "load / mean": float(load[g]) / mean})
    return pd.DataFrame(rows)


def options_text(options: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in sorted(options.items())}, separators=(", ", "="))[1:-1].replace('"', "")


# solvers.compare's columns, with the held-out gaps after the in-sample ones.
_AT = COLUMNS.index("gap_in_policy_mean") + 1
COMPARE_COLUMNS = (*COLUMNS[:_AT], "holdout_gap_mean", "holdout_gap_max", *COLUMNS[_AT:], *TIME_COLUMNS)


def compare_row(name: str, outcome: Outcome, holdout: Holdout | None) -> dict[str, Any]:
    """One row of the Compare table: :meth:`solvers.SolveResult.summary`, the columns of
    :mod:`solvers.compare` (fractions for gaps), plus the held-out gaps."""
    r = outcome.result
    row = r.summary(holdout=None if holdout is None or r.score is None else holdout.score)
    row["solver"] = name
    if holdout is not None and r.score is not None:
        row.update({"holdout_gap_mean": float(holdout.gap.mean()), "holdout_gap_max": float(holdout.gap.max())})
        if holdout.per_step is not None:
            row.update(holdout_step_columns(holdout.per_step))
    return {c: row.get(c) for c in COMPARE_COLUMNS if c in row}


DISPATCH_MODELS = {"even split": "even", "scheduled split": "scheduled"}


def microbatch_imbalance(plan: Plan, tokens: torch.Tensor, cluster, model: str = "even split") -> torch.Tensor:
    """[B, L] max / mean GPU load of every micro-batch and layer under a dispatch model
    (:func:`solvers.dispatch.microbatches.microbatch_imbalance`). tokens: [B, L, E] counts;
    cluster: the plan's :class:`~solvers.Cluster` (or a GPU count for R/P slots each).
    "even split": each replica serves t_e / c_e; "scheduled split": per micro-batch, the split
    of each expert's tokens over its replicas with the smallest max GPU load."""

    if model not in DISPATCH_MODELS:
        raise ValueError(f"dispatch: must be one of {', '.join(DISPATCH_MODELS)}, got {model!r}")
    return imbalance(plan, tokens, cluster, DISPATCH_MODELS[model])


def common_start(results) -> int:
    """The first step every replay scores: the latest first plan among them (a longer window
    starts scoring later; totals over different steps would not compare)."""
    return max(r.first_step for r in results)


def replay_totals(result, start: int) -> dict[str, Any]:
    """:meth:`SimulationResult.totals` on steps ``start..T-1`` only (``start`` >= the replay's
    first scored step), so that several settings are scored on the same steps; moves,
    bytes and rebalances count the whole replay."""
    if start < result.first_step:
        raise ValueError(f"start: must be >= the replay's first scored step {result.first_step}, got {start}")
    s = result.imbalance[start:]                                    # [T - start]
    out = dict(result.totals())
    out.update(mean_imbalance=float(s.mean()) if s.numel() else math.nan,
               p99_imbalance=float(torch.quantile(s, 0.99)) if s.numel() else math.nan,
               worst_imbalance=float(result.imbalance_worst[start:].max()) if s.numel() else math.nan,
               tokens_lost=float(result.tokens_lost[start:].sum()), steps_scored=int(s.numel()))
    return out
