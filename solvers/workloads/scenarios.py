"""The named workload scenarios of :mod:`solvers.workloads.generators` (plain Python, no torch:
``eplb generate --help`` lists them)."""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError

LAWS = ("lognormal", "zipf", "dirichlet")


@dataclass(frozen=True)
class Scenario:
    """Parameters of a generated workload (:mod:`solvers.workloads.generators` says what each mimics).

    law: ``lognormal`` (skew = sigma of log-popularity), ``zipf`` (skew = exponent s of
        rank^-s over a random ranking), ``dirichlet`` (concentration alpha = 1 / skew).
    skew: > 0, larger is more concentrated on few experts.
    layer_spread: >= 0, std of log(skew) across layers (0: every layer the same skew).
    group_sigma: >= 0, std of a log-popularity term shared by the experts of one group.
    num_mixes: >= 1 request-mix components; mix_concentration: Dirichlet alpha of the mix
        weights (small: one mix dominates at a time).
    shift_every: mean steps between regime shifts (0: never; needs num_mixes >= 2).
    drift: >= 0, per-step std of the log-space random walk; drift_timescale: > 0 steps.
    burst_rate: in [0, 1], probability per step that a burst starts; burst_scale: >= 1;
        burst_experts: experts hit per layer; burst_steps: >= 1 steps a burst lasts.
    """

    description: str = ""
    law: str = "lognormal"
    skew: float = 0.8
    layer_spread: float = 0.3
    group_sigma: float = 0.0
    num_mixes: int = 1
    mix_concentration: float = 0.5
    shift_every: float = 0.0
    drift: float = 0.0
    drift_timescale: float = 200.0
    burst_rate: float = 0.0
    burst_scale: float = 4.0
    burst_experts: int = 1
    burst_steps: int = 1

    def replace(self, **overrides: Any) -> "Scenario":
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise OptionError(unknown[0], f"unknown generator parameter; known: {', '.join(sorted(names - {'description'}))}")
        return dataclasses.replace(self, **overrides).validated()

    def validated(self) -> "Scenario":
        if self.law not in LAWS:
            raise OptionError("law", f"must be one of {', '.join(LAWS)}, got {self.law!r}")
        for name, lo, hi, lo_open in (("skew", 0.0, 50.0, True), ("layer_spread", 0.0, 5.0, False),
                                      ("group_sigma", 0.0, 10.0, False), ("mix_concentration", 0.0, 1e6, True),
                                      ("shift_every", 0.0, 1e12, False), ("drift", 0.0, 10.0, False),
                                      ("drift_timescale", 0.0, 1e12, True), ("burst_rate", 0.0, 1.0, False),
                                      ("burst_scale", 1.0, 1e6, False)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise OptionError(name, f"must be a finite number, got {v!r}")
            if v > hi or v < lo or (lo_open and v == lo):
                raise OptionError(name, f"must be in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {v!r}")
        # num_mixes: one [layers, experts] popularity table each is held at once
        for name, hi in (("num_mixes", 1024), ("burst_experts", 1 << 16), ("burst_steps", 1 << 24)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 1 <= v <= hi:
                raise OptionError(name, f"must be an integer in [1, {hi}], got {v!r}")
        return self

    def params(self) -> dict[str, Any]:
        """The generator parameters as plain values (for a trace's meta)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "description"}


SCENARIOS: dict[str, Scenario] = {
    "uniform": Scenario("Nearly flat routing: a well-trained router with a load-balancing loss.",
                        skew=0.15, layer_spread=0.0),
    "mild": Scenario("Moderate, stable skew (hottest expert ~3-5x the mean); slight drift.",
                     skew=0.5, layer_spread=0.25, group_sigma=0.2, drift=0.01, drift_timescale=200),
    "skewed": Scenario("Heavy-tailed, stable popularity (hottest expert ~10x the mean); hot and "
                       "flat layers.", skew=1.0, layer_spread=0.3, group_sigma=0.3, drift=0.01,
                       drift_timescale=200),
    "drifting": Scenario("Skewed popularity that wanders: hot experts cool down and others heat "
                         "up over a few hundred steps.", skew=0.8, layer_spread=0.3, group_sigma=0.2,
                         drift=0.06, drift_timescale=300),
    "shifting-mix": Scenario("A mix of request types, each with its own hot set; the mix changes "
                             "abruptly every ~100 steps (regime shifts) on top of a slow drift.",
                             skew=0.9, layer_spread=0.3, group_sigma=0.2, num_mixes=4,
                             mix_concentration=0.3, shift_every=100, drift=0.02, drift_timescale=200),
    "bursty": Scenario("Skewed and stable, with short bursts where a few experts get 8x their "
                       "usual traffic.", skew=0.8, layer_spread=0.3, drift=0.01, burst_rate=0.05,
                       burst_scale=8.0, burst_experts=2, burst_steps=3),
    "zipf": Scenario("Zipf-ranked popularity (rank^-0.6), stable.", law="zipf", skew=0.6,
                     layer_spread=0.2, drift=0.01),
    "dirichlet": Scenario("Dirichlet popularity (alpha = 1), stable; many cold experts.",
                          law="dirichlet", skew=1.0, layer_spread=0.3, drift=0.01),
}


def get_scenario(scenario: str) -> Scenario:
    if not isinstance(scenario, str) or scenario not in SCENARIOS:
        raise OptionError("scenario", f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    return SCENARIOS[scenario]
