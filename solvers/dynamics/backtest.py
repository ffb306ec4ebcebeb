"""``backtest``: a planner that checks itself on its window before it commits (out of sample).

Every out-of-sample planner is a bet on one kind of drift: recency weights and risk terms
win on regime shifts and drifting popularity and lose on bursts, where the window's plain
sum is the better guess. This planner lets the window itself say which bet to make:

1. **Rolling-origin folds.** The window's steps ``history [W, L, E]`` are cut into ``folds``
   (train, test) pairs: each fold plans on ``h`` consecutive steps and is scored on the ``H``
   steps that follow them (the last fold ends at the window's last step). All folds have the
   same lengths, so they are stacked as independent layers of one problem and every
   candidate plans all of them in one batched call. The folds use ``layers`` evenly spaced
   layers of the window (the choice is shared by all layers: pooled evidence is steadier).
2. **Candidates** (:data:`CANDIDATES`): estimators and risk levels that exist elsewhere in
   the package: the greedy on the window sum (the level), ``kk_swap`` on an exponentially
   weighted history, ``risk_aware`` with its defaults (recent steps weigh more), with every
   step weighed the same, and at FlashLB's upper quartile z = 0.674 on a few consecutive
   blocks of the window (multi-shot). Each fold's plans are scored on its test steps by the
   shared scorer (per-step time imbalance, :func:`solvers.scoring.score`); inside the folds
   the risk candidates' swap search is cut to ``FOLD_STEPS`` rounds (what the folds cost).
3. **The choice.** One candidate is the incumbent (``incumbent``: ``risk``, risk_aware's
   defaults, the best on average out of sample before this planner): another candidate is
   *eligible* only when its gain over the incumbent on the folds' (fold, layer) pairs is
   significant, a paired t statistic of at least ``confidence`` (bursts and spikes make the
   gains scatter over the pairs: a bet that cannot show a clear gain keeps the incumbent).
   Per fold a candidate's *regret* is its score over the fold's best minus 1. Among the
   eligible, the least mean regret is chosen when the evidence agrees (it is within
   ``tolerance`` of the best in most folds); otherwise the least worst regret over the
   folds: the choice that is safest across them. A window of fewer than ``min_steps``
   steps has no folds and gets ``fallback`` (the greedy: no risk terms to estimate from a
   few steps).
4. The chosen candidate plans the whole window; ``info`` says what was chosen, by which
   rule and why, with every candidate's fold scores, mean and worst regret, and which were
   eligible; the result's message says it in one line.

All candidates are batched over layers (and folds); ``benchmarks/backtest_speed.py`` measures
the 58 x 256 plan (folds and final plan together), ``benchmarks/generalisation.py`` how it does
out of sample. The defaults (incumbent, confidence, fold lengths, candidates) were chosen on
that benchmark's development seeds only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import OptionError
from ..options import Option, SolverOptions, policy_option
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, register, run
from ..scoring import score
from ..threads import one_intra_op_thread
from ..work import WorkModel
from .risk import DEFAULT_COUNT_RISK, DEFAULT_HALFLIFE, DEFAULT_RISK, plan_risk_aware
from .robust import _HISTORY, buckets_of, check_history, ewma_weights

# A candidate: (problem, history [W, X, E], resolved policy, inside a fold) -> phy2log [X, R].
Planner = Callable[[Problem, torch.Tensor, str, bool], torch.Tensor]


def _greedy(problem: Problem, hist: torch.Tensor, policy: str, fold: bool = False) -> torch.Tensor:
    return run(problem.with_weights(hist.sum(0)), "deepseek", {"policy": policy}).plan.phy2log


def _ewma(problem: Problem, hist: torch.Tensor, policy: str, fold: bool = False) -> torch.Tensor:
    return run(problem.with_weights(ewma_weights(hist, DEFAULT_HALFLIFE)), "kk_swap", {"policy": policy}).plan.phy2log


def _risk(steps: int = 64, shots: int | None = None, **settings) -> Planner:
    def plan(problem: Problem, hist: torch.Tensor, policy: str, fold: bool = False) -> torch.Tensor:
        if shots is not None:                  # sums of consecutive blocks: steadier series
            hist = buckets_of(hist, shots)
        return plan_risk_aware(problem, hist, policy, steps=min(steps, FOLD_STEPS) if fold else steps, **settings)[0]
    return plan


SHOTS = 8


# Swap rounds of the risk candidates inside the folds. The rounds are what the folds cost most
# (many small kernels on few rows), but without them the folds compare the risk candidates'
# bare placements with kk_swap's searched ones and pick the wrong estimator; the first rounds
# bring most of the search's gain. The chosen candidate searches in full on the whole window.
FOLD_STEPS = 16


@dataclass(frozen=True)
class Candidate:
    name: str
    plan: Planner
    what: str


# In the order ties are broken (the first of equals wins): the cheapest, least risky first.
CANDIDATES: dict[str, Candidate] = {c.name: c for c in (
    Candidate("greedy", _greedy, "the greedy (deepseek) on the window's sum: the level, no risk"),
    Candidate("ewma", _ewma, f"kk_swap on the window weighted with a halflife of {DEFAULT_HALFLIFE:g} steps"),
    Candidate("shots", _risk(count_risk=0.674, risk=0.674, halflife=None, noise=0.0, shots=SHOTS),
              f"risk_aware at the upper quartile on {SHOTS} consecutive blocks of the window (multi-shot), "
              "every block weighed the same"),
    Candidate("risk", _risk(count_risk=DEFAULT_COUNT_RISK, risk=DEFAULT_RISK, halflife=DEFAULT_HALFLIFE, noise=1.0),
              "risk_aware with its defaults (recent steps weigh more)"),
    Candidate("flat", _risk(count_risk=DEFAULT_COUNT_RISK, risk=DEFAULT_RISK, halflife=None, noise=1.0),
              "risk_aware with every step of the window weighed the same (robust to its whole span)"),
)}
DEFAULT_CANDIDATES = ",".join(CANDIDATES)


def parse_candidates(value: str) -> list[str]:
    """Comma-separated candidate names -> the list (OptionError ``candidates`` when bad)."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown or not names:
        raise OptionError("candidates", f"must name one or more of {', '.join(CANDIDATES)} (comma-separated), "
                          f"got {value!r}")
    if len(set(names)) != len(names):
        raise OptionError("candidates", f"names a candidate twice: {value!r}")
    return names


def fold_layout(num_steps: int, folds: int, min_steps: int) -> tuple[int, int, list[int]]:
    """(train steps h, test steps H, origins): fold f plans on [o - h, o) and is scored on
    [o, o + H). H = W / 4 (at least 1), h = W / 2 (at least 2); the origins spread from h to
    W - H (the last fold ends at the window's end). No folds (``[]``) below ``min_steps``."""
    W = num_steps
    if W < max(min_steps, 3):
        return 0, 0, []
    H = max(1, W // 4)
    h = max(2, W // 2)
    lo, hi = h, W - H
    if hi < lo:                                      # short windows: one fold, the rest to train
        h, lo = hi, hi
    if h < 2:
        return 0, 0, []
    n = max(1, min(folds, hi - lo + 1))
    origins = sorted({round(lo + (hi - lo) * i / max(1, n - 1)) for i in range(n)}) if n > 1 else [hi]
    return h, H, origins


def gain_t(pairs: torch.Tensor, incumbent: int) -> torch.Tensor:
    """[C] t statistic of each candidate's gain over the incumbent on the paired (fold, layer)
    scores ``pairs [C, n]``: mean(incumbent - c) / its standard error (0 for the incumbent)."""
    d = pairs[incumbent].unsqueeze(0) - pairs                                 # [C, n] > 0: c is better
    n = d.shape[1]
    if n < 2:
        return torch.zeros(d.shape[0], dtype=d.dtype)
    se = d.std(1) / n ** 0.5
    t = d.mean(1) / se.clamp_min(1e-12)
    return torch.where(se > 0, t, torch.where(d.mean(1) > 0, torch.inf, 0.0))


def choose(scores: torch.Tensor, tolerance: float, confidence: float = 0.0, incumbent: int | None = None,
           pairs: torch.Tensor | None = None) -> tuple[int, str, torch.Tensor, torch.Tensor]:
    """(index, rule, regret [C, F], eligible [C] bool) from the fold scores [C, F] (lower is better).

    regret = score / the fold's best - 1. With an ``incumbent``, another candidate
    is *eligible* only when its gain over the incumbent on the paired (fold, layer) scores
    ``pairs [C, n]`` has a t statistic of at least ``confidence`` (:func:`gain_t`): a window
    whose folds cannot tell a bet from noise keeps the incumbent. Among the eligible, the least
    mean regret wins when it is within ``tolerance`` of each fold's best in a majority of the
    folds ("mean"); otherwise the least worst regret ("safest"); "incumbent" when no other
    candidate is eligible. Ties go to the first candidate."""
    best = scores.min(0).values
    regret = scores / best - 1                                                # [C, F]
    eligible = torch.ones(scores.shape[0], dtype=torch.bool)
    if incumbent is not None:
        eligible = gain_t(scores if pairs is None else pairs, incumbent) >= confidence
        eligible[incumbent] = True
    if incumbent is not None and int(eligible.sum()) == 1:
        return incumbent, "incumbent", regret, eligible
    mean = regret.mean(1).masked_fill(~eligible, float("inf"))
    worst = regret.max(1).values.masked_fill(~eligible, float("inf"))
    F = scores.shape[1]
    by_mean = int(torch.nonzero(mean <= mean.min() + 1e-12)[0])
    agrees = int((regret[by_mean] <= tolerance).sum())
    if F >= 2 and 2 * agrees > F:
        return by_mean, "mean", regret, eligible
    return int(torch.nonzero(worst <= worst.min() + 1e-12)[0]), "safest", regret, eligible


def backtest_scores(problem: Problem, hist: torch.Tensor, policy: str, names: list[str], h: int, H: int,
                    origins: list[int], layers: int) -> tuple[torch.Tensor, list[int]]:
    """[C, F, Ls] held-out per-step (time) imbalance of each candidate on each fold and each of
    ``layers`` evenly spaced layers; and those layers. hist: [W, L, E]."""
    W, L, E = hist.shape
    Ls = min(L, layers)
    picked = sorted({round(i * (L - 1) / max(1, Ls - 1)) for i in range(Ls)}) if Ls > 1 else [L // 2]
    idx = torch.tensor(picked, device=hist.device)
    sub = hist.index_select(1, idx)                                            # [W, Ls, E]
    F, Ls = len(origins), len(picked)
    # Fold-major rows: row f * Ls + j is layer picked[j] in fold f.
    train = torch.cat([sub[o - h:o] for o in origins], 1)                     # [h, F*Ls, E]
    test = torch.cat([sub[o:o + H] for o in origins], 1)                      # [H, F*Ls, E]
    rows = Problem(train.sum(0), cluster=problem.cluster, num_groups=problem.num_groups)
    held = rows.with_weights(test.sum(0))
    out = torch.empty(len(names), F, Ls, dtype=torch.float64)
    for c, name in enumerate(names):
        p2l = CANDIDATES[name].plan(rows, train, policy, True)
        imb = score(held, Plan.from_phy2log(p2l, E), tokens=test).time_imbalance     # [F*Ls]
        out[c] = imb.to(torch.float64).cpu().view(F, Ls)
    return out, picked


# The t statistic a candidate's gain over the incumbent needs (``confidence``). 1.5 rather than
# 1: on 94 development traces of benchmarks/generalisation.py (seeds 101-102 on all 21 settings,
# 103-105 on 18) it kept `risk` more often where the folds favour ewma or the greedy by chance
# (bursts, spikes): setting regret against the best of greedy / ewma / risk_aware / FlashLB-style
# 0.30 % -> 0.20 % mean, 2.09 % -> 0.85 % worst (equal on 101-102 alone, better on 103-105).
DEFAULT_CONFIDENCE = 1.5


BACKTEST_WORK = WorkModel.of({"1": 0, "S": 0, "R": 0.006, "L*R": 0, "L*E*R": 1.51e-07, "L*S^2": 0,
                              "L*R*S": 2.84e-06, "T*L*R": 1.19e-06, "T*L*R*steps": 0, "B*L*R*S*steps": 0})


@register("backtest", kind="heuristic", in_suites=False, heterogeneous=True, work=BACKTEST_WORK,
          options=(policy_option(), _HISTORY,
                   Option("candidates", str, DEFAULT_CANDIDATES, "comma-separated candidates the folds choose "
                          f"from ({', '.join(CANDIDATES)})"),
                   Option("folds", int, 3, "rolling-origin folds (plan on earlier steps, score on later ones)",
                          minimum=1, maximum=16),
                   Option("min_steps", int, 6, "windows with fewer steps are not backtested: the fallback plans",
                          minimum=3, maximum=10**6),
                   Option("fallback", str, "greedy", "the candidate for windows too short to backtest",
                          choices=tuple(CANDIDATES)),
                   Option("tolerance", float, 0.001, "a candidate within this regret of a fold's best counts as "
                          "winning it; the least mean regret is chosen only when it wins most folds, else the "
                          "least worst regret", minimum=0.0, maximum=1.0, advanced=True),
                   Option("incumbent", str, "risk", "the candidate kept unless another one's gain over it is "
                          "significant", choices=tuple(CANDIDATES), advanced=True),
                   Option("confidence", float, DEFAULT_CONFIDENCE, "another candidate replaces the incumbent only "
                          "when its gain over it on the folds' (fold, layer) pairs has a t statistic of at least this",
                          minimum=0.0, maximum=100.0, advanced=True),
                   Option("layers", int, 8, "layers the folds are scored on (evenly spaced)", minimum=1,
                          maximum=4096, advanced=True),
                   Option("buckets", int, 128, "the window's steps are summed into at most this many consecutive "
                          "blocks (bounds time and memory)", minimum=1, maximum=4096, advanced=True)),
          description="out of sample: backtests candidate estimators and risk levels on the window "
                      "(rolling origin) and plans the whole window with the one the evidence picks")
def solve_backtest(problem: Problem, o: SolverOptions) -> SolverOutput:
    names = parse_candidates(o.candidates)
    hist = buckets_of(check_history(problem, o.history), o.buckets)
    resolved = problem.resolve_policy(o.policy)
    W = hist.shape[0]
    h, H, origins = fold_layout(W, o.folds, o.min_steps)
    info: dict = {"steps_in_window": W, "candidates": names}
    with one_intra_op_thread():     # many small kernels: an OpenMP team only waits on a busy machine
        if not origins or len(names) == 1:
            pick = names[0] if len(names) == 1 else o.fallback
            rule = "only" if len(names) == 1 else "fallback"
            why = ("one candidate given" if len(names) == 1 else
                   f"a window of {W} steps is too short to backtest (min_steps {o.min_steps}): the fallback")
        else:
            pairs, picked = backtest_scores(problem, hist, resolved, names, h, H, origins, o.layers)
            scores = pairs.mean(2)                                              # [C, F]
            inc = names.index(o.incumbent) if o.incumbent in names else None
            i, rule, regret, eligible = choose(scores, o.tolerance, o.confidence, inc, pairs.flatten(1))
            t = gain_t(pairs.flatten(1), inc) if inc is not None else None
            pick = names[i]
            mean, worst = regret.mean(1), regret.max(1).values
            wins = (regret <= o.tolerance).sum(1)
            info.update(folds=len(origins), fold_train_steps=h, fold_test_steps=H, fold_origins=origins,
                        fold_layers=picked,
                        fold_scores={n: [round(float(v), 6) for v in scores[c]] for c, n in enumerate(names)},
                        mean_regret={n: float(mean[c]) for c, n in enumerate(names)},
                        eligible=[n for c, n in enumerate(names) if bool(eligible[c])],
                        confidence=o.confidence,
                        **({} if t is None else {"gain_t": {n: round(float(t[c]), 3) for c, n in enumerate(names)}}),
                        worst_regret={n: float(worst[c]) for c, n in enumerate(names)})
            if rule == "incumbent":
                why = (f"no candidate's gain over {o.incumbent} on {len(origins)} folds x {len(picked)} layers "
                       f"reached t >= {o.confidence:g} (best t {float(t.masked_fill(t == torch.inf, 0).max()):.2f}): "
                       "too thin to bet on: the incumbent")
            elif rule == "mean":
                why = (f"least mean regret over {len(origins)} folds ({100 * float(mean[i]):.2f} %), within "
                       f"{100 * o.tolerance:g} % of the best in {int(wins[i])} of them")
            else:
                lead = int(mean.masked_fill(~eligible, float("inf")).argmin())
                why = (f"the folds disagree (the least mean regret wins {int(wins[lead])} of "
                       f"{len(origins)}): the safest, worst regret {100 * float(worst[i]):.2f} %")
        p2l = CANDIDATES[pick].plan(problem, hist, resolved)
    info.update(chosen=pick, rule=rule, reason=why)
    return SolverOutput(Plan.from_phy2log(p2l, problem.num_experts), resolved, info=info,
                        message=f"backtest chose {pick} ({CANDIDATES[pick].what}): {why}")
