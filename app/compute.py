"""What the pages compute, as plain functions of tensors (no Streamlit; the pages cache them).

The sidebar's :class:`solvers.Cluster` and expert groups plus loads make a
:class:`solvers.Problem`; :func:`run_solver` is
:func:`solvers.solve` plus the gap within the plan's own policy; :func:`held_out` scores a
plan on loads it was not planned on. Tables for the pages come from :func:`metric_cards`,
:func:`plan_table` and :func:`compare_row`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from solvers import Problem, SolveResult, lower_bound, score, solve
from solvers.bounds import structure_bound
from solvers.plan import Plan
from solvers.result import ratio_gap
from solvers.scoring import Score


@dataclass(frozen=True)
class Outcome:
    """A solve with what the pages show beside it.

    result: the SolveResult (plan graded by the shared scorer). gap_in_policy: [L] gap
    against the bound for every plan of the plan's own node structure (None without a
    plan).
    """

    result: SolveResult
    gap_in_policy: torch.Tensor | None


def run_solver(problem: Problem, solver: str, options: dict[str, Any]) -> Outcome:
    """:func:`solvers.solve` plus the gap within the plan's policy (the structure bound)."""
    result = solve(problem, solver, **options)
    gip = None
    if result.plan is not None:
        gip = ratio_gap(result.score.max_time, torch.maximum(structure_bound(problem, result.plan),
                                                             result.lower_bound))
    return Outcome(result, gip)


@dataclass(frozen=True)
class HeldOut:
    """A plan scored on held-out loads: score, the bound valid there, and the gap [L]."""

    score: Score
    lower_bound: torch.Tensor
    gap: torch.Tensor


def held_out(problem: Problem, plan: Plan) -> HeldOut:
    """Score ``plan`` on ``problem`` (loads it was not planned on) and its gap to the bound
    that holds for every plan on those loads."""
    sc = score(problem, plan)
    lb = lower_bound(problem)
    return HeldOut(sc, lb, ratio_gap(sc.max_time, lb))


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.2f}%"


def worst_layer(result: SolveResult) -> int:
    """The layer with the largest imbalance: where Explore's layer views open."""
    return int(torch.argmax(result.score.imbalance))


def metric_cards(outcome: Outcome, moves: Score | None = None) -> list[tuple[str, str, str]]:
    """(label, value, help) of the Explore page's metric cards."""
    r = outcome.result
    m = r.score.metrics()
    gap, gip = r.gap, outcome.gap_in_policy
    cards = [
        ("Imbalance (mean)", f"{m['imbalance_mean']:.4f}", "max GPU load / mean GPU load, averaged over layers (1 is perfect)"),
        ("Worst layer", f"{m['imbalance_worst']:.4f}", "the largest max / mean over layers"),
        ("Balancedness", f"{m['balancedness']:.4f}", "mean / max GPU load averaged over layers (what vLLM and SGLang log); "
                                                      f"sum form {m['balancedness_sum']:.4f}"),
        ("Node imbalance", f"{m['node_imbalance_mean']:.4f}", f"max / mean node load, mean over layers (worst "
                                                                f"{m['node_imbalance_worst']:.4f})"),
        ("Gap to bound", _pct(float(gap.mean())), f"objective / lower bound - 1, mean over layers (worst layer "
                                                   f"{_pct(float(gap.max()))}); the bound holds for every plan"),
        ("Gap within policy", _pct(None if gip is None else float(gip.mean())),
         "the same against the bound for every plan keeping this plan's node structure (for a hierarchical "
         "plan: whole groups per node); gap to bound minus this is what the policy costs"),
        ("Duplicates", f"{m['duplicates']}", "(layer, GPU, expert) with two or more replicas on one GPU"),
        ("Off-node share", _pct(m.get("off_node_share_mean")),
         "share of tokens served outside their group's home node (inter-node traffic proxy; - without groups)"),
        ("Time", f"{r.wall_time:.3g} s", "the solver's wall time"),
        ("Termination", str(r.termination), "why the solver stopped; policy " + r.policy
         + (f"; {r.message}" if r.message else "")),
        ("Solution", str(r.status), "what the plan is worth: proven_optimal (meets the bound valid for every "
                                    "plan), optimal_in_model (only within the solver's restricted model), feasible"),
    ]
    if "time_imbalance_mean" in m:      # GPUs of different speeds: the objective is time
        cards.append(("Time imbalance", f"{m['time_imbalance_mean']:.4f}",
                      "max GPU time (load / speed) over the best possible time (W / total speed), mean over "
                      f"layers (worst {m['time_imbalance_worst']:.4f})"))
    if moves is not None and moves.moves is not None:
        size = "-" if moves.moves_bytes is None else f"{moves.moves_bytes / 1e9:,.2f} GB"
        cards.append(("Moves", f"{moves.moves:,}", "replicas a GPU must load because the current placement's GPU "
                                                   "did not hold that expert"))
        cards.append(("Bytes moved", size, "moves x expert size"))
    return cards


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
    per_slot = w[p2l] / cnt[p2l]
    load = torch.zeros(num_gpus, dtype=torch.float64).index_add_(0, torch.tensor(gpu_of), per_slot)
    mean = float(load.mean()) or 1.0
    held_by = [[] for _ in range(num_gpus)]
    for p, e in enumerate(p2l.tolist()):
        held_by[gpu_of[p]].append(e)
    rows = []
    for g, experts in enumerate(held_by):
        held: dict[int, int] = {}
        for e in experts:
            held[e] = held.get(e, 0) + 1
        text = ", ".join(f"{e}" if k == 1 else f"{e}×{k}" for e, k in sorted(held.items()))
        rows.append({"GPU": g, "node": g // (num_gpus // num_nodes), "experts": text,
                     "tokens": float(load[g]), "load / mean": float(load[g]) / mean})
    return pd.DataFrame(rows)


def options_text(options: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in sorted(options.items())}, separators=(", ", "="))[1:-1].replace('"', "")


def compare_row(name: str, outcome: Outcome, holdout: HeldOut | None) -> dict[str, Any]:
    """One row of the Compare table, in the columns of :mod:`solvers.compare` (fractions for
    gaps) plus the held-out gaps."""
    r = outcome.result
    row: dict[str, Any] = {"solver": name, "policy": r.policy, "termination": str(r.termination),
                           "status": str(r.status), "wall_time_s": r.wall_time}
    if r.score is None:
        return {**row, "message": r.message}
    m = r.score.metrics()
    row.update({"imbalance_mean": m["imbalance_mean"], "imbalance_worst": m["imbalance_worst"]})
    if holdout is not None:
        hm = holdout.score.metrics()
        row.update({"holdout_imbalance_mean": hm["imbalance_mean"], "holdout_imbalance_worst": hm["imbalance_worst"]})
    row.update({"gap_mean": r.gap_mean, "gap_max": r.gap_max,
                "gap_in_policy_mean": None if outcome.gap_in_policy is None else float(outcome.gap_in_policy.mean())})
    if holdout is not None:
        row.update({"holdout_gap_mean": float(holdout.gap.mean()), "holdout_gap_max": float(holdout.gap.max())})
    row.update({"off_node_share_mean": m.get("off_node_share_mean"), "duplicates": m["duplicates"],
                "message": r.message})
    if "time_imbalance_mean" in m:      # GPUs of different speeds: what the cluster pays is time
        row.update({"time_imbalance_mean": m["time_imbalance_mean"], "time_imbalance_worst": m["time_imbalance_worst"]})
        if holdout is not None:
            row["holdout_time_imbalance_mean"] = holdout.score.summary.get("time_imbalance_mean")
    return row


DISPATCH_MODELS = {"even split": "even", "scheduled split": "scheduled"}


def microbatch_imbalance(plan: Plan, tokens: torch.Tensor, num_gpus: int, model: str = "even split") -> torch.Tensor:
    """[B, L] max / mean GPU load of every micro-batch and layer under a dispatch model
    (:func:`solvers.dispatch.microbatches.microbatch_imbalance`). tokens: [B, L, E] counts.
    "even split": each replica serves t_e / c_e; "scheduled split": per micro-batch, the split
    of each expert's tokens over its replicas with the smallest max GPU load."""
    from solvers.dispatch.microbatches import microbatch_imbalance as imbalance

    if model not in DISPATCH_MODELS:
        raise ValueError(f"dispatch: must be one of {', '.join(DISPATCH_MODELS)}, got {model!r}")
    return imbalance(plan, tokens, num_gpus, DISPATCH_MODELS[model])
