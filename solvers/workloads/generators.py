"""Synthetic load traces that behave like real MoE routing.

Every step routes ``tokens_per_step * top_k`` token-to-expert assignments per layer with
one multinomial draw, so counts are integers and every ``[step, layer]`` row sums to
exactly ``tokens_per_step * top_k``. The routing probabilities come from a log-popularity

    z[t, l, e] = log(sum_m mix[t, m] * base[m, l, e]) + walk[t, l, e] + burst[t, l, e]

and what each term mimics in real serving:

- ``base``  expert popularity per layer from a heavy-tailed law (``law``/``skew``):
  real loads have a hottest expert 5-15x the mean. Each layer draws its own skew
  (``layer_spread``): some layers are hot, some nearly flat. Experts of one group share a
  popularity term (``group_sigma``), as group-limited routing (DeepSeek-V3) concentrates
  tokens on a few groups.
- ``mix``   the request mix (``num_mixes`` components, e.g. chat, code, maths), each with
  its own hot set. A **regime shift** (on average every ``shift_every`` steps) redraws the
  mix weights, so the hot set changes abruptly, as when the traffic of a service changes.
- ``walk``  slow drift: a mean-reverting random walk in log space (step std ``drift``,
  reversion time ``drift_timescale`` steps); popularity is stable over tens of steps and
  wanders over hundreds.
- ``burst`` short bursts: with probability ``burst_rate`` per step, ``burst_experts``
  experts per layer get ``burst_scale`` times their popularity for ``burst_steps`` steps
  (a batch of similar requests arriving together).

An expert receives at most one assignment per token, so probabilities are capped at
``1 / top_k`` (water-filling); the expected count per expert never exceeds the tokens.

Generation is vectorised: the walk is a loop over steps of ``[layers, experts]`` array
operations, the draws are numpy's batched multinomial over ``[steps, layers, experts]``.
"""
from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch

from ..errors import OptionError
from ..cluster import ModelPreset, get_model
from .scenarios import LAWS, SCENARIOS, Scenario, get_scenario  # noqa: F401  (re-exported)
from .trace import Trace

_CHUNK_ELEMENTS = 1 << 22  # float64 probabilities drawn per multinomial call (32 MiB)


def _count(value: Any, name: str, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise OptionError(name, f"must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise OptionError(name, f"must be <= {maximum}, got {value!r}")
    return int(value)


# Size caps, checked before any work: a trace is held in memory as int64
# [steps, layers, experts] (2**28 cells = 2 GiB), and counts must stay exact in int64.
MAX_TRACE_CELLS = 1 << 28
MAX_TOKENS_PER_STEP = 1 << 40
MAX_STEPS = 1 << 24
MAX_EXPERTS = 1 << 16


def _check_size(steps: int, L: int, E: int, tokens: int, k: int) -> None:
    """Refuse a trace too large to hold, or whose counts could overflow int64."""
    cells = steps * L * E
    if cells > MAX_TRACE_CELLS:
        raise OptionError("steps", f"{steps} steps x {L} layers x {E} experts = {cells} counts; at most "
                          f"{MAX_TRACE_CELLS} ({MAX_TRACE_CELLS * 8 >> 30} GiB) per trace: use fewer steps or layers")
    if steps * tokens * k >= 1 << 62:
        raise OptionError("tokens_per_step", f"{steps} steps x {tokens} tokens x top-{k} overflows int64 counts")


# ---------------------------------------------------------------------------------------
# The terms of the log-popularity

def _base_log_popularity(rng: np.random.Generator, sc: Scenario, skew_l: np.ndarray,
                         num_experts: int, num_groups: int) -> np.ndarray:
    """z: [layers, experts] log-popularity of one request mix (up to a per-layer constant)."""
    L, E = skew_l.shape[0], num_experts
    if sc.law == "lognormal":
        z = skew_l[:, None] * rng.standard_normal((L, E))
    elif sc.law == "zipf":
        ranks = rng.permuted(np.tile(np.arange(1, E + 1, dtype=np.float64), (L, 1)), axis=1)
        z = -skew_l[:, None] * np.log(ranks)
    else:  # dirichlet: normalised gammas; log of a tiny floor keeps zero draws finite
        g = rng.gamma(1.0 / skew_l[:, None], size=(L, E))
        z = np.log(np.maximum(g, 1e-300))
    if sc.group_sigma > 0 and num_groups > 1:
        group = sc.group_sigma * rng.standard_normal((L, num_groups))
        z = z + np.repeat(group, E // num_groups, axis=1)
    return z - z.max(axis=1, keepdims=True)


def _mix_weights(rng: np.random.Generator, sc: Scenario, steps: int) -> np.ndarray:
    """mix: [steps, num_mixes]; constant between regime shifts."""
    M = sc.num_mixes
    if M == 1:
        return np.ones((steps, 1))
    shift = rng.random(steps) < 1.0 / sc.shift_every if sc.shift_every > 0 else np.zeros(steps, dtype=bool)
    shift[0] = True
    regime = np.cumsum(shift) - 1                                  # [steps] regime id
    weights = rng.dirichlet(np.full(M, sc.mix_concentration), size=int(regime[-1]) + 1)
    return weights[regime]


def _random_walk(rng: np.random.Generator, sc: Scenario, steps: int, L: int, E: int) -> np.ndarray | None:
    """walk: [steps, layers, experts] float32 mean-reverting (AR(1)) walk, or None without drift.

    Starts at 0 (the base popularity) so a trace begins where its base says.
    """
    if sc.drift == 0:
        return None
    rho = math.exp(-1.0 / sc.drift_timescale)
    walk = rng.standard_normal((steps, L, E), dtype=np.float32)
    walk *= np.float32(sc.drift)
    walk[0] = 0
    for t in range(1, steps):  # one [L, E] fused update per step; steps are sequential by nature
        walk[t] += np.float32(rho) * walk[t - 1]
    return walk


def _bursts(rng: np.random.Generator, sc: Scenario, steps: int, L: int, E: int) -> list[tuple[int, np.ndarray]]:
    """[(start step, experts [layers, burst_experts])] of each burst."""
    if sc.burst_rate == 0:
        return []
    starts = np.flatnonzero(rng.random(steps) < sc.burst_rate)
    k = min(sc.burst_experts, E)
    return [(int(t), np.argsort(rng.random((L, E)), axis=1)[:, :k]) for t in starts]


def _cap(p: np.ndarray, cap: float) -> np.ndarray:
    """Water-fill rows of p (summing to 1) so no entry exceeds ``cap`` (needs cap * E >= 1).

    Closed form: with the j largest entries capped, the rest scale by
    (1 - j cap) / (their sum); j is the first count where the largest uncapped entry fits.
    """
    if cap >= 1.0 or not (p > cap).any():
        return p
    E = p.shape[-1]
    s = -np.sort(-p, axis=-1)                                          # descending
    rest = np.cumsum(s[..., ::-1], axis=-1)[..., ::-1]                 # rest[j] = sum of s[j:]
    j = np.arange(E)
    scale = np.maximum(1.0 - j * cap, 0.0) / np.maximum(rest, 1e-300)
    fits = s * scale <= cap * (1 + 1e-12)
    first = np.argmax(fits, axis=-1)[..., None]                        # capped entries per row
    scale_row = np.take_along_axis(scale, first, axis=-1)
    return np.minimum(p * scale_row, cap)


def _step_probabilities(base_p: np.ndarray, mix: np.ndarray, walk: np.ndarray | None,
                        bursts: list[tuple[int, np.ndarray]], sc: Scenario, t0: int, t1: int,
                        cap: float) -> np.ndarray:
    """p: [t1 - t0, layers, experts] float64 routing probabilities of steps t0..t1-1."""
    logp = np.log(np.maximum(np.einsum("tm,mle->tle", mix[t0:t1], base_p), 1e-300))
    if walk is not None:
        logp += walk[t0:t1]
    if bursts:
        boost = math.log(sc.burst_scale)
        layers = np.arange(base_p.shape[1])[:, None]
        for start, experts in bursts:
            lo, hi = max(start, t0), min(start + sc.burst_steps, t1)
            if lo < hi:
                logp[lo - t0:hi - t0, layers, experts] += boost
    logp -= logp.max(-1, keepdims=True)
    p = np.exp(logp)
    p /= p.sum(-1, keepdims=True)
    return _cap(p, cap)


def _resolve_shape(preset: ModelPreset, num_layers: Any, overrides: dict[str, Any]) -> tuple[int, int, int, int]:
    L = preset.num_layers if num_layers is None else _count(num_layers, "num_layers", 1)
    if L > preset.num_layers:
        raise OptionError("num_layers", f"{preset.name} has {preset.num_layers} MoE layers; "
                          f"num_layers keeps the first ones, got {L}")
    E = _count(overrides.pop("num_experts", preset.num_experts), "num_experts", 1, MAX_EXPERTS)
    G = _count(overrides.pop("num_groups", preset.num_groups if E == preset.num_experts else 1), "num_groups", 1)
    k = _count(overrides.pop("top_k", preset.top_k), "top_k", 1)
    if E % G != 0:
        raise OptionError("num_groups", f"must divide num_experts ({E}), got {G}")
    if k > E:
        raise OptionError("top_k", f"must be <= num_experts ({E}), got {k}")
    return L, E, G, k


def generate(model: str, scenario: str = "mild", *, steps: int = 100, seed: int = 0,
             tokens_per_step: int = 4096, num_layers: int | None = None, **overrides: Any) -> Trace:
    """A seeded synthetic trace: loads [steps, layers, experts] int64 for a model preset.

    model: a key of MODELS; scenario: a key of SCENARIOS; steps: forward passes (or
    windows) to draw; tokens_per_step: tokens routed per step, each to top_k experts;
    num_layers: keep fewer layers than the model has (small instances).
    overrides: any :class:`Scenario` field (``skew=1.5``, ``drift=0.1``...) and the shape
    fields ``num_experts``, ``num_groups``, ``top_k``.
    The same arguments always give the same trace (numpy's PCG64 seeded with ``seed``).
    """
    preset = get_model(model)
    sc = get_scenario(scenario)
    steps = _count(steps, "steps", 1, MAX_STEPS)
    seed = _count(seed, "seed", 0, 2**63 - 1)
    tokens = _count(tokens_per_step, "tokens_per_step", 1, MAX_TOKENS_PER_STEP)
    overrides = dict(overrides)
    L, E, G, k = _resolve_shape(preset, num_layers, overrides)
    _check_size(steps, L, E, tokens, k)
    sc = sc.replace(**overrides) if overrides else sc.validated()

    rng = np.random.default_rng(seed)
    skew_l = sc.skew * np.exp(sc.layer_spread * rng.standard_normal(L))          # [L]
    base_z = np.stack([_base_log_popularity(rng, sc, skew_l, E, G) for _ in range(sc.num_mixes)])
    base_p = np.exp(base_z)
    base_p /= base_p.sum(-1, keepdims=True)                                       # [M, L, E]
    mix = _mix_weights(rng, sc, steps)                                            # [T, M]
    walk = _random_walk(rng, sc, steps, L, E)                                     # [T, L, E] | None
    bursts = _bursts(rng, sc, steps, L, E)

    loads = np.empty((steps, L, E), dtype=np.int64)
    n = tokens * k
    chunk = max(1, _CHUNK_ELEMENTS // (L * E))
    for t0 in range(0, steps, chunk):                   # chunks bound the float64 working memory
        t1 = min(steps, t0 + chunk)
        p = _step_probabilities(base_p, mix, walk, bursts, sc, t0, t1, cap=1.0 / k)
        loads[t0:t1] = rng.multinomial(n, p)

    meta = {"model": model, "model_name": preset.name, "num_layers": L, "num_experts": E,
            "num_groups": G, "top_k": k, "scenario": scenario, "seed": seed, "steps": steps,
            "tokens_per_step": tokens, "generator": "solvers.workloads.generate",
            "params": sc.params(), "layer_skew": [round(float(s), 6) for s in skew_l]}
    return Trace(torch.from_numpy(loads), meta)
