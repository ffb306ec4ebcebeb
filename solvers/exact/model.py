"""Backend-independent part of the exact models: options, per-layer data, warm starts.

Every placement model (packing, joint, hierarchical, and the joint model in time on a real
cluster) is one formulation per layer, over the cluster's live GPUs (the *view*: each GPU's
slot count ``slots[g]`` and speed ``s_g``; a homogeneous cluster is the case of S slots and
speed 1 everywhere):

- candidate counts ``cand[e]`` per expert (one value when counts are fixed), binary
  ``y[e, c]`` picks one; integer ``z[e, c, g]`` replicas of e (with count c) on GPU g,
  ``sum_g z[e, c, g] = c * y[e, c]``: identical replicas are aggregated, never one
  variable per replica;
- exactly ``slots[g]`` replicas on GPU g; GPU time ``sum w_e / (c s_g) z[e, c, g] <= T``;
  minimise T, with T's domain ``[best combinatorial bound, warm start's value]``;
- symmetry broken by ordered times of interchangeable GPUs (same node, speed and slot
  count; hierarchical also orders the node loads), and warm starts are permuted the same
  way so hints stay consistent;
- hierarchical (identical GPUs only): binary ``a[k, n]`` puts group k on node n (G/N groups
  per node when ``node_budget="fixed"``, any number when "free"); ``z[e, c, g] <= c *
  a[group(e), node(g)]`` keeps replicas inside their node. Each node has its R/N slots.

The replication model only chooses counts (``min max_e w_e / c_e``); its optimum is a
lower bound on the max GPU load, and its plan places the counts with DeepSeek's packing
(the heuristics' duplicate-free packing under colocation="forbidden").

On a real cluster (per-GPU speeds, uneven slots, failed GPUs) the joint model is solved,
global policy; its warm start is ``kk_swap``'s plan (the speed-aware heuristic).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from ..bounds import lower_bound, optimal_counts
from ..deepseek import balanced_packing, deepseek_plan
from ..errors import OptionError, PlanError
from ..heuristics.packing import pack_counts
from ..plan import Plan
from ..problem import Problem
from ..registry import get_solver, run


@dataclass(frozen=True)
class ExactOptions:
    """The options every exact backend's models read (made by :func:`exact_options`)."""

    model: str
    counts: str                    # "free" or "fixed" (resolved from the model)
    colocation: str
    node_budget: str
    time_limit: float              # seconds for the whole solve (all layers)
    threads: int
    seed: int
    gap: float
    warm_start: Any                # "auto", None or a Plan
    replica_counts: torch.Tensor | None  # [L, E] int64 when given

    @property
    def hierarchical(self) -> bool:
        return self.model == "hierarchical"

    @property
    def forbid(self) -> bool:
        return self.colocation == "forbidden"


def exact_options(problem: Problem, o: Any) -> ExactOptions:
    """What the models read, from the solver's typed options (each checked by the schema):
    the internal model resolved from (policy, model), and the checks across options and the
    problem (the hierarchical shape, the warm start and counts fitting it, colocation).

    Internal models: "replication"; "joint" and "packing" (global: free or fixed counts);
    "hierarchical" with free or fixed counts. On one node the hierarchical model restricts
    nothing, so the simpler global one is solved. A real cluster has the joint model only."""
    resolved = problem.resolve_policy(o.policy)        # raises ProblemError on a bad shape
    if not problem.cluster.homogeneous and o.model != "joint":
        raise OptionError("model", "on a cluster with speeds, uneven slots or failed GPUs only the joint model "
                          f"is available, got {o.model!r}")
    if o.model == "replication" or resolved == "global" or problem.num_nodes == 1:
        model, counts = o.model, ("fixed" if o.model == "packing" else "free")
    else:
        model, counts = "hierarchical", ("free" if o.model == "joint" else "fixed")
    colocation, node_budget, warm_start, replica_counts = o.colocation, o.node_budget, o.warm_start, o.replica_counts
    L, E, R, P = problem.num_layers, problem.num_experts, problem.num_replicas, problem.num_gpus
    if warm_start is False:
        warm_start = None
    if warm_start is not None and not (isinstance(warm_start, Plan) or warm_start == "auto"):
        raise OptionError("warm_start", f"must be 'auto', None or a solvers.Plan, got {type(warm_start).__name__}")
    if isinstance(warm_start, Plan):
        warm_start = warm_start.to("cpu")
        try:
            problem.validate_plan(warm_start)
        except PlanError as exc:
            raise OptionError("warm_start", f"does not fit the problem: {exc}") from None
    rc = None
    if replica_counts is not None:
        if counts != "fixed":
            raise OptionError("replica_counts", f"only applies with fixed counts (model={model!r}, counts={counts!r})")
        try:
            rc = torch.as_tensor(np.asarray(replica_counts.cpu() if isinstance(replica_counts, torch.Tensor)
                                            else replica_counts))
        except (TypeError, ValueError) as exc:
            raise OptionError("replica_counts", f"must be an integer array ({exc})") from None
        if rc.is_floating_point() or rc.dtype == torch.bool:
            raise OptionError("replica_counts", f"must hold integers, got {rc.dtype}")
        rc = rc.to(torch.int64)
        if rc.dim() == 1:
            rc = rc.expand(L, -1)
        if tuple(rc.shape) != (L, E):
            raise OptionError("replica_counts", f"must have shape ({L}, {E}) or ({E},), got {tuple(rc.shape)}")
        if bool((rc < 1).any()) or bool((rc.sum(1) != R).any()):
            raise OptionError("replica_counts", f"must be >= 1 with every layer summing to {R}")
        rc = rc.contiguous()
    if colocation == "forbidden":
        pool = E // problem.num_nodes if model == "hierarchical" and node_budget == "fixed" else E
        most = max(problem.cluster.gpu_slots)
        if pool < most:
            raise OptionError("colocation", f"'forbidden' is infeasible: a GPU has {most} slots but only "
                              f"{pool} distinct experts can go there")
        cap = P // problem.num_nodes if model == "hierarchical" else P
        if rc is not None and int(rc.max()) > cap:
            raise OptionError("colocation", f"'forbidden' is infeasible: an expert has {int(rc.max())} "
                              f"replicas but can reach only {cap} GPUs")
    return ExactOptions(model, counts, colocation, node_budget, o.time_limit, o.threads, o.seed, o.gap, warm_start,
                        rc)


@dataclass
class LayerModel:
    """One layer's model data, shared by the CP-SAT and PuLP formulations.

    w: [E] loads (float); slots: [P] int64 replicas and speed: [P] float64 speed of every
    GPU of the view (the live GPUs); cand[e]: candidate replica counts of expert e; lb: a
    valid lower bound on this model's optimum; warm: [E, P] replicas of e on GPU g of a
    feasible warm start (canonical GPU order not yet applied) with ``warm_counts`` [E] and
    ``ub`` its value.
    """

    w: np.ndarray
    slots: np.ndarray
    speed: np.ndarray
    num_nodes: int                 # 1 unless hierarchical
    num_groups: int                # 1 unless hierarchical
    hierarchical: bool
    node_budget: str
    forbid: bool
    replication_only: bool
    cand: list[Sequence[int]]
    lb: float
    warm: np.ndarray | None = None
    warm_counts: np.ndarray | None = None
    ub: float | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self):
        # sizes of the view (recomputed by dataclasses.replace, as scaling does)
        self.num_experts, self.num_gpus, self.num_replicas = len(self.w), len(self.slots), int(self.slots.sum())
        self.unit_speed = bool((self.speed == 1.0).all())
        self.gpus_per_node, self.group_size = self.num_gpus // self.num_nodes, self.num_experts // self.num_groups

    @property
    def placement_variables(self) -> int:
        """Number of z[e, c, g] variables of the placement model."""
        return sum(len(c) for c in self.cand) * self.num_gpus

    def max_per_gpu(self, c: int, g: int) -> int:
        """Most replicas of one expert (with count c) on GPU g."""
        return 1 if self.forbid else min(c, int(self.slots[g]))

    def time(self, xg: np.ndarray) -> float:
        """Max GPU time of a placement xg: [E, P] (even split), float64."""
        return float(((self.w / xg.sum(1)) @ xg / self.speed).max())

    def classes(self) -> list[list[int]]:
        """Interchangeable GPUs (same node, speed and slot count), each list in GPU order."""
        out: dict[tuple, list[int]] = {}
        for g in range(self.num_gpus):
            out.setdefault((g // self.gpus_per_node, float(self.speed[g]), int(self.slots[g])), []).append(g)
        return list(out.values())


@dataclass
class LayerResult:
    """What a backend returns for one layer.

    xg: [E, P] replicas of e on GPU g (None if no solution); counts: [E] for the
    replication model; status: "optimal", "feasible" (stopped at the gap), "time_limit",
    "infeasible" or "error"; bound: proven lower bound on the model's optimum (or None).
    """

    status: str
    xg: np.ndarray | None = None
    counts: np.ndarray | None = None
    bound: float | None = None
    objective: float | None = None
    message: str = ""
    stats: dict = field(default_factory=dict)


def warm_layer(xg: np.ndarray, counts: np.ndarray, lm: LayerModel) -> str | None:
    """Why the warm start ``xg`` [E, P] is infeasible for ``lm`` (None when feasible)."""
    for e, c in enumerate(counts):
        if int(c) not in lm.cand[e]:
            return f"expert {e} has {int(c)} replicas, outside the model's counts {lm.cand[e][0]}..{lm.cand[e][-1]}"
    if lm.forbid and int(xg.max()) > 1:
        return "two replicas of one expert share a GPU (colocation='forbidden')"
    if lm.hierarchical:
        gpn = lm.gpus_per_node
        on_node = xg.reshape(lm.num_experts, lm.num_nodes, gpn).sum(2) > 0            # [E, N]
        grp = on_node.reshape(lm.num_groups, lm.group_size, lm.num_nodes).any(1)      # [G, N]
        if bool((grp.sum(1) != 1).any()):
            return "a group's replicas span several nodes (not a hierarchical plan)"
        if lm.node_budget == "fixed" and bool((grp.sum(0) != lm.num_groups // lm.num_nodes).any()):
            return "nodes do not hold G/N groups each (node_budget='fixed')"
    return None


def canonical_gpu_order(loads: np.ndarray, lm: LayerModel) -> np.ndarray:
    """GPU permutation [P] that sorts nodes by load, then interchangeable GPUs by time,
    descending. loads: [P] the GPU times in the backend's own units (so ties and order agree
    exactly with the model's symmetry-breaking constraints)."""
    gpn = lm.gpus_per_node
    node_loads = loads.reshape(lm.num_nodes, gpn).sum(1)
    nodes = sorted(range(lm.num_nodes), key=lambda n: -node_loads[n])
    order = np.concatenate([np.arange(n * gpn, (n + 1) * gpn) for n in nodes])
    for members in lm.classes():
        order[members] = sorted(order[members].tolist(), key=lambda g: -loads[g])
    return order


def layer_problem_bound(problem: Problem, opts: ExactOptions, counts: torch.Tensor | None) -> torch.Tensor:
    """[L] combinatorial bound valid for the model (fixed counts / hierarchical add bounds)."""
    policy = "hierarchical" if opts.hierarchical else "global"
    return lower_bound(problem, counts=counts if opts.counts == "fixed" else None, policy=policy,
                       node_budget=opts.node_budget)


def default_warm_plan(problem: Problem, opts: ExactOptions, time_limit: float | None = None
                      ) -> tuple[Plan, tuple[Plan, ...]]:
    """The warm start of ``warm_start='auto'``, and other plans whose better feasible layers
    replace it (:func:`build_layer` keeps, per layer, the best feasible of them).

    DeepSeek's plan for the model's policy; with free counts also kk_swap's plan (the
    heuristics' best packing, usually far closer to the optimum) when its estimated work fits
    in a quarter of ``time_limit`` (None: always). Fixed-count models keep DeepSeek's counts
    (documented as the default counts). With colocation="forbidden" DeepSeek's plan usually
    puts two replicas of a hot expert on one GPU (and would be dropped, leaving CP-SAT
    without a hint): the heuristics' duplicate-free plan (kk_swap with nodup) instead,
    DeepSeek's when that fails. On a real cluster: kk_swap's plan (duplicate-free under
    forbidden colocation).
    """
    if not problem.cluster.homogeneous:
        return run(problem.to("cpu"), "kk_swap", {"colocation": opts.colocation}).plan, ()
    policy = "hierarchical" if opts.hierarchical else "global"
    kk = {"policy": policy, "colocation": opts.colocation}
    affordable = time_limit is None or get_solver("kk_swap").estimate(problem, kk) <= 0.25 * time_limit
    if opts.forbid:
        try:
            out = run(problem.to("cpu"), "kk_swap", {**kk, "colocation": "forbidden"})
        except (ValueError, RuntimeError):
            out = None
        if out is not None and out.plan is not None:
            return out.plan.to("cpu"), ()
    greedy = deepseek_plan(problem.weights.cpu(), problem.num_replicas, problem.num_groups,
                           problem.num_nodes, problem.num_gpus, policy)
    if opts.counts != "free" or not affordable or opts.forbid:
        return greedy, ()
    try:
        out = run(problem.to("cpu"), "kk_swap", kk)
    except (ValueError, RuntimeError):         # a shape kk_swap refuses: DeepSeek's plan alone
        return greedy, ()
    return greedy, (() if out.plan is None else (out.plan.to("cpu"),))


def fit_warm_to_counts(problem: Problem, opts: ExactOptions, warm_plan: Plan | None,
                       fixed: torch.Tensor | None) -> Plan | None:
    """The automatic warm start of a global fixed-count model, with the model's counts.

    Where the given ``replica_counts`` differ from the automatic warm start's (DeepSeek's)
    counts, that layer's warm start would be dropped; place the given counts with the
    heuristics' packing instead (duplicate-free under colocation="forbidden"). Hierarchical
    models keep the automatic plan (the packing knows no nodes).
    """
    if fixed is None or opts.hierarchical or opts.warm_start != "auto":
        return warm_plan
    differ = torch.ones(problem.num_layers, dtype=torch.bool) if warm_plan is None else \
        (warm_plan.logcnt.cpu() != fixed).any(1)
    if not bool(differ.any()):
        return warm_plan
    rows = differ.nonzero().flatten()
    e_slots, obj = pack_counts(problem.weights.cpu()[rows].to(torch.float64), fixed[rows], problem.num_gpus,
                               nodup=opts.forbid, starts=("kk", "lpt", "rr") if opts.forbid else ("kk", "lpt"))
    phy2log = (torch.zeros(problem.num_layers, problem.num_replicas, dtype=torch.int64) if warm_plan is None
               else warm_plan.phy2log.cpu().clone())
    phy2log[rows] = e_slots.to(torch.int64)
    return Plan.from_phy2log(phy2log, problem.num_experts)


def plan_counts_matrix(phy2log: np.ndarray, num_experts: int, slots: np.ndarray) -> np.ndarray:
    """phy2log: [R] -> [E, P] number of replicas of e on GPU g (slots: [P] per GPU)."""
    xg = np.zeros((num_experts, len(slots)), dtype=np.int64)
    np.add.at(xg, (phy2log, np.repeat(np.arange(len(slots)), slots)), 1)
    return xg


def phy2log_from_matrix(xg: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """[E, P] replicas per GPU -> phy2log [R] (experts in id order on each GPU)."""
    E, P = xg.shape
    if bool((xg.sum(0) != slots).any()):
        raise RuntimeError("solver returned a GPU with the wrong number of replicas")
    # GPU-major, experts in id order inside each GPU, each repeated its count there
    return np.repeat(np.tile(np.arange(E), P), xg.T.reshape(-1))


def candidate_counts(w: np.ndarray, lm_caps: np.ndarray, total: int, ub: float | None,
                     fastest: float = 1.0) -> list[range]:
    """Counts each expert may take in an optimal plan of value <= ub.

    w: [E]; lm_caps: [E] structural max count. With an upper bound ub, an expert needs
    c >= w_e / (ub x the fastest speed) (its replica must fit under ub), and the others'
    minimums cap it.
    """
    E = len(w)
    lo = np.ones(E, dtype=np.int64)
    if ub is not None and ub > 0:
        lo = np.maximum(1, np.ceil(w / (ub * fastest) * (1 - 1e-12) - 1e-12).astype(np.int64))
    hi = np.minimum(lm_caps, total - (lo.sum() - lo))
    hi = np.maximum(hi, lo)      # infeasible only if the warm start was; keep one candidate
    # ranges, not lists: E of them per layer are built even for layers left to the warm start
    return [range(a, b + 1) for a, b in zip(lo.tolist(), hi.tolist())]


def build_layer(problem: Problem, layer: int, opts: ExactOptions, warm_plan: Plan | None,
                fixed: torch.Tensor | None, lb: float, explicit_warm: bool,
                alternatives: Sequence[Plan] = ()) -> LayerModel:
    """The model data of one layer (counts candidates, bound, feasible warm start).
    ``alternatives``: other plans; the layer's warm start is the best feasible of all."""
    w = problem.weights[layer].detach().cpu().to(torch.float64).numpy()
    c = problem.cluster
    live = list(c.live_gpus)
    slots = np.asarray([c.gpu_slots[g] for g in live], dtype=np.int64)
    speed = np.asarray([c.gpu_speed[g] for g in live], dtype=np.float64)
    E, P, R = problem.num_experts, len(live), problem.num_replicas
    hier = opts.hierarchical
    N = problem.num_nodes if hier else 1
    G = problem.num_groups if hier else 1
    lm = LayerModel(w, slots, speed, N, G, hier, opts.node_budget, opts.forbid, opts.model == "replication", [], lb)
    # Structural caps on one expert's count.
    if hier and opts.node_budget == "fixed":
        cap = (R - E) // N + 1
    elif hier:
        cap = R // N - E // G + 1
    else:
        cap = R - E + 1
    if opts.forbid:
        cap = min(cap, P // N)
    caps = np.full(E, cap, dtype=np.int64)
    xg = counts = None
    if warm_plan is not None:
        xg = plan_counts_matrix(warm_plan.phy2log[layer].numpy(), E, slots)
        counts = xg.sum(1)
    if fixed is not None:
        lm.cand = [[int(c)] for c in fixed[layer].tolist()]
    elif lm.replication_only:
        lm.cand = [list(range(1, cap + 1))] * E
    else:
        ub = None
        if xg is not None:
            # Candidate pruning needs a *feasible* upper bound: check structure first.
            lm.cand = [list(range(1, cap + 1))] * E
            if warm_layer(xg, counts, lm) is None:
                ub = lm.time(xg)
            for other in alternatives:               # a better feasible layer of another plan
                oxg = plan_counts_matrix(other.phy2log[layer].numpy(), E, slots)
                if warm_layer(oxg, oxg.sum(1), lm) is None and (ub is None or lm.time(oxg) < ub):
                    xg, counts, ub = oxg, oxg.sum(1), lm.time(oxg)
        lm.cand = candidate_counts(w, caps, R, ub, float(speed.max()))
    if xg is not None and lm.replication_only:
        if all(int(c) in lm.cand[e] for e, c in enumerate(counts)):
            lm.warm_counts = counts                  # a hint for the counts model
        elif explicit_warm:
            raise OptionError("warm_start", f"layer {layer}: an expert has more replicas than GPUs "
                              "(colocation='forbidden')")
    if xg is not None and not lm.replication_only:
        why = warm_layer(xg, counts, lm)
        if why is None:
            lm.warm, lm.warm_counts, lm.ub = xg, counts, lm.time(xg)
        elif explicit_warm:
            raise OptionError("warm_start", f"layer {layer}: infeasible for model {opts.model!r}: {why}")
        else:
            lm.notes.append(f"warm start dropped: {why}")
    return lm


def replication_plan(w: np.ndarray, counts: np.ndarray, num_gpus: int, forbid: bool = False) -> np.ndarray:
    """phy2log [R] placing the given counts with DeepSeek's balanced packing (float64).

    With ``forbid`` (colocation="forbidden") no GPU gets two replicas of one expert: the
    heuristics' duplicate-free packing (its round-robin start always exists when every
    count is <= the GPUs, which the model's counts are).
    """
    if forbid:
        e_slots, obj = pack_counts(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float64)).unsqueeze(0),
                                   torch.from_numpy(np.asarray(counts, dtype=np.int64)).unsqueeze(0),
                                   num_gpus, nodup=True, starts=("kk", "lpt", "rr"))
        if not math.isfinite(float(obj[0])):
            raise RuntimeError("no duplicate-free placement of the replication model's counts")
        return e_slots[0].numpy().astype(np.int64)
    phy_e = np.repeat(np.arange(len(w)), counts)
    items = torch.from_numpy(w[phy_e] / counts[phy_e]).unsqueeze(0)
    pack, rank = balanced_packing(items, num_gpus)
    S = len(phy_e) // num_gpus
    slot = (pack * S + rank)[0].numpy()
    p2l = np.empty_like(phy_e)
    p2l[slot] = phy_e
    return p2l


def fixed_counts_for(problem: Problem, opts: ExactOptions, warm_plan: Plan | None) -> torch.Tensor | None:
    """[L, E] counts for fixed-count models: given, else the warm start's, else optimal replication."""
    if opts.counts != "fixed":
        return None
    if opts.replica_counts is not None:
        return opts.replica_counts
    # forbidden colocation: an expert reaches at most the GPUs (of its node)
    cap = problem.num_gpus // (problem.num_nodes if opts.hierarchical else 1) if opts.forbid else None
    if warm_plan is not None:
        counts = warm_plan.logcnt.cpu()
        if cap is None or int(counts.max()) <= cap or isinstance(opts.warm_start, Plan):
            return counts
    return optimal_counts(problem.weights.cpu(), problem.num_replicas, cap)
