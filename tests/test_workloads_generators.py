"""Statistical checks of the synthetic load generators, presets, scenarios and windows."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.errors import OptionError
from solvers.cluster import MODELS, ModelPreset
from solvers.workloads import (SCENARIOS, Trace, generate, out_of_sample_pairs,
                               windows)


def top_sets(weights: torch.Tensor, k: int) -> torch.Tensor:
    """[layers, experts] bool: the k hottest experts of each layer."""
    idx = weights.topk(k, dim=-1).indices
    return torch.zeros_like(weights, dtype=torch.bool).scatter_(-1, idx, True)


def hot_overlap(a: torch.Tensor, b: torch.Tensor, k: int) -> float:
    """Mean over layers of |top_k(a) & top_k(b)| / k."""
    return float((top_sets(a, k) & top_sets(b, k)).sum(-1).double().mean()) / k


def cv(weights: torch.Tensor) -> torch.Tensor:
    """[layers] coefficient of variation over experts."""
    w = weights.double()
    return w.std(-1) / w.mean(-1)


def test_presets_match_design_table():
    assert set(MODELS) == {"deepseek-v3", "qwen3-235b", "mixtral-8x7b", "olmoe-1b-7b", "kimi-k2"}
    ds = MODELS["deepseek-v3"]
    assert isinstance(ds, ModelPreset)
    assert (ds.num_layers, ds.num_experts, ds.num_groups, ds.top_k) == (58, 256, 8, 8)
    assert (MODELS["kimi-k2"].num_experts, MODELS["mixtral-8x7b"].top_k) == (384, 2)
    for p in MODELS.values():
        assert p.num_experts % p.num_groups == 0 and p.top_k <= p.num_experts


def test_required_scenarios_exist():
    assert {"mild", "skewed", "drifting", "shifting-mix"} <= set(SCENARIOS)
    assert all(sc.description for sc in SCENARIOS.values())


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_step_routes_tokens_times_top_k(model, scenario):
    tr = generate(model, scenario, steps=6, seed=11, tokens_per_step=512, num_layers=3)
    p = MODELS[model]
    assert isinstance(tr, Trace)
    assert tr.loads.dtype == torch.int64
    assert tuple(tr.loads.shape) == (6, 3, p.num_experts)
    assert (tr.num_steps, tr.num_layers, tr.num_experts) == (6, 3, p.num_experts)
    assert bool((tr.loads >= 0).all())
    assert bool((tr.loads.sum(-1) == 512 * p.top_k).all())
    assert tr.meta["model"] == model and tr.meta["scenario"] == scenario
    assert (tr.meta["num_experts"], tr.meta["num_groups"], tr.meta["top_k"]) == (p.num_experts, p.num_groups, p.top_k)
    assert tr.meta["seed"] == 11 and tr.meta["tokens_per_step"] == 512


def test_full_preset_shape_by_default():
    tr = generate("deepseek-v3", "mild", steps=2, seed=0)
    assert tuple(tr.loads.shape) == (2, 58, 256)


def test_seeds_reproduce_and_differ():
    a = generate("olmoe-1b-7b", "shifting-mix", steps=40, seed=5, num_layers=4)
    b = generate("olmoe-1b-7b", "shifting-mix", steps=40, seed=5, num_layers=4)
    c = generate("olmoe-1b-7b", "shifting-mix", steps=40, seed=6, num_layers=4)
    assert torch.equal(a.loads, b.loads) and a.meta == b.meta
    assert not torch.equal(a.loads, c.loads)


@pytest.mark.parametrize("law,skews", [("lognormal", (0.2, 0.6, 1.2)), ("zipf", (0.2, 0.5, 0.9)),
                                       ("dirichlet", (0.1, 0.5, 2.0))])
def test_skew_grows_with_its_parameter(law, skews):
    # The same seed at growing skew: the spread over experts of the total load grows.
    spreads = []
    for s in skews:
        tr = generate("olmoe-1b-7b", "mild", steps=20, seed=3, num_layers=8, law=law, skew=s,
                      layer_spread=0.0, group_sigma=0.0, drift=0.0)
        spreads.append(float(cv(tr.trace.sum(0)).mean()))
    assert spreads[0] < spreads[1] < spreads[2], spreads


def test_skewed_scenario_is_heavy_tailed_and_layers_differ():
    tr = generate("deepseek-v3", "skewed", steps=20, seed=0, num_layers=16)
    w = tr.trace.sum(0).double()
    hot = w.max(-1).values / w.mean(-1)                          # [layers] hottest / mean
    assert float(hot.median()) > 5                               # DESIGN: often 5-15x the mean
    assert float(cv(w).max() / cv(w).min()) > 1.5                # hot and flat layers
    flat = generate("deepseek-v3", "uniform", steps=20, seed=0, num_layers=16).trace.sum(0).double()
    assert float((flat.max(-1).values / flat.mean(-1)).max()) < 2.5


def test_group_term_correlates_experts_of_a_group():
    kw = dict(steps=10, seed=2, num_layers=8, skew=0.2, layer_spread=0.0, drift=0.0)
    grouped = generate("deepseek-v3", "mild", group_sigma=1.0, **kw).trace.sum(0).double()
    plain = generate("deepseek-v3", "mild", group_sigma=0.0, **kw).trace.sum(0).double()

    def between_group_share(w):  # variance of group sums relative to the total variance
        g = w.view(w.shape[0], 8, 32).mean(-1)
        return float((g.var(-1) / w.var(-1)).mean())

    assert between_group_share(grouped) > 3 * between_group_share(plain)


def test_drift_changes_the_hot_set_over_time():
    kw = dict(steps=600, seed=4, num_layers=8, tokens_per_step=2048)
    drifting = windows(generate("olmoe-1b-7b", "drifting", **kw), 100)
    stable = windows(generate("olmoe-1b-7b", "drifting", drift=0.0, **kw), 100)
    k = 8
    near = hot_overlap(drifting[0], drifting[1], k)
    far = hot_overlap(drifting[0], drifting[-1], k)
    still = hot_overlap(stable[0], stable[-1], k)
    assert still > 0.85                                         # no drift: the same hot experts
    assert far < 0.7 and far < near                             # drift: they change, more with time


def test_regime_shifts_change_the_hot_set_abruptly():
    kw = dict(steps=400, seed=8, num_layers=6, drift=0.0, tokens_per_step=2048)
    shifting = generate("olmoe-1b-7b", "shifting-mix", shift_every=50, **kw)
    fixed = generate("olmoe-1b-7b", "shifting-mix", shift_every=0, **kw)
    ws, wf = windows(shifting, 25), windows(fixed, 25)
    jumps_s = [1 - hot_overlap(ws[i], ws[i + 1], 8) for i in range(len(ws) - 1)]
    jumps_f = [1 - hot_overlap(wf[i], wf[i + 1], 8) for i in range(len(wf) - 1)]
    assert max(jumps_s) > 0.3 > max(jumps_f)


def test_bursts_raise_the_per_step_peak():
    kw = dict(steps=200, seed=1, num_layers=4, drift=0.0, skew=0.3, tokens_per_step=2048)
    bursty = generate("olmoe-1b-7b", "bursty", burst_rate=0.2, burst_scale=20.0, **kw).loads.double()
    calm = generate("olmoe-1b-7b", "bursty", burst_rate=0.0, **kw).loads.double()
    peak_b = (bursty.max(-1).values / bursty.mean(-1)).max(-1).values   # [steps]
    peak_c = (calm.max(-1).values / calm.mean(-1)).max(-1).values
    assert float((peak_b > float(peak_c.max())).double().mean()) > 0.1


def test_no_expert_expects_more_than_one_assignment_per_token():
    # Mixtral routes each token to 2 of 8 experts: an expert gets at most every token.
    tr = generate("mixtral-8x7b", "skewed", steps=50, seed=0, tokens_per_step=4000, skew=5.0)
    assert float(tr.loads.double().max(-1).values.mean()) <= 4000 * 1.01
    assert bool((tr.loads.sum(-1) == 8000).all())


def test_shape_overrides():
    tr = generate("kimi-k2", "mild", steps=3, num_layers=2, num_experts=32, num_groups=4, top_k=4)
    assert tuple(tr.loads.shape) == (3, 2, 32) and tr.meta["num_groups"] == 4
    assert bool((tr.loads.sum(-1) == 4096 * 4).all())


@pytest.mark.parametrize("args,kwargs,param", [
    (("gpt-5",), {}, "model"),
    (("kimi-k2", "calm"), {}, "scenario"),
    (("kimi-k2",), {"steps": 0}, "steps"),
    (("kimi-k2",), {"steps": 2.5}, "steps"),
    (("kimi-k2",), {"seed": -1}, "seed"),
    (("kimi-k2",), {"tokens_per_step": 0}, "tokens_per_step"),
    (("kimi-k2",), {"num_layers": 0}, "num_layers"),
    (("kimi-k2",), {"skew": 0}, "skew"),
    (("kimi-k2",), {"skew": float("nan")}, "skew"),
    (("kimi-k2",), {"law": "pareto"}, "law"),
    (("kimi-k2",), {"burst_rate": 1.5}, "burst_rate"),
    (("kimi-k2",), {"num_mixes": 0}, "num_mixes"),
    (("kimi-k2",), {"temperature": 1.0}, "temperature"),
    (("kimi-k2",), {"num_experts": 30, "num_groups": 4}, "num_groups"),
    (("kimi-k2",), {"num_experts": 4, "top_k": 8}, "top_k"),
])
def test_bad_arguments_raise_option_error_naming_the_parameter(args, kwargs, param):
    with pytest.raises(OptionError) as err:
        generate(*args, steps=kwargs.pop("steps", 2), **kwargs)
    assert err.value.param == param


def test_windows_and_out_of_sample_pairs():
    tr = generate("olmoe-1b-7b", "mild", steps=23, seed=0, num_layers=3)
    w = windows(tr, 5)
    assert tuple(w.shape) == (4, 3, 64)                          # the last 3 steps are dropped
    assert torch.equal(w[1], tr.loads[5:10].sum(0))
    pairs = out_of_sample_pairs(tr, 5)
    assert len(pairs) == 3
    assert all(torch.equal(a, w[i]) and torch.equal(b, w[i + 1]) for i, (a, b) in enumerate(pairs))
    assert torch.equal(windows(tr.loads, 23)[0], tr.trace.sum(0))     # a bare tensor works too
    with pytest.raises(OptionError, match="size"):
        windows(tr, 24)
    with pytest.raises(OptionError, match="size"):
        windows(tr, 0)
    with pytest.raises(OptionError, match="size"):
        out_of_sample_pairs(tr, 12)


@settings(max_examples=25, deadline=None)
@given(T=st.integers(1, 12), size=st.integers(1, 12), L=st.integers(1, 3), E=st.integers(1, 5))
def test_windows_partition_the_kept_steps(T, size, L, E):
    loads = torch.arange(T * L * E, dtype=torch.int64).view(T, L, E)
    if size > T:
        with pytest.raises(OptionError):
            windows(loads, size)
        return
    w = windows(Trace(loads), size)
    W = T // size
    assert w.shape[0] == W
    assert torch.equal(w.sum(0), loads[:W * size].sum(0))


def test_trace_rejects_bad_loads():
    with pytest.raises(OptionError, match="loads"):
        Trace(torch.zeros(3, 4))
    with pytest.raises(OptionError, match="loads"):
        Trace(torch.zeros(2, 3, 4, dtype=torch.bool))
    # one loads type: float weights are loads too (read_trace still refuses fractional counts)
    assert torch.equal(Trace(torch.ones(2, 3, 4)).weights, torch.full((3, 4), 2.0))


@settings(max_examples=40, deadline=None)
@given(E=st.integers(2, 40), k=st.integers(1, 8), sigma=st.floats(0.0, 4.0), seed=st.integers(0, 2**16))
def test_probability_cap_water_fills(E, k, sigma, seed):
    import numpy as np

    from solvers.workloads.generators import _cap

    k = min(k, E)
    rng = np.random.default_rng(seed)
    p = np.exp(sigma * rng.standard_normal((3, E)))
    p /= p.sum(-1, keepdims=True)
    q = _cap(p, 1.0 / k)
    assert np.allclose(q.sum(-1), 1.0)
    assert (q <= 1.0 / k + 1e-9).all()
    # Entries below the cap keep their relative sizes (one common scale per row).
    for row_p, row_q in zip(p, q):
        free = row_q < 1.0 / k - 1e-9
        if free.sum() >= 2:
            ratio = row_q[free] / row_p[free]
            assert np.allclose(ratio, ratio[0])
            assert ratio[0] >= 1.0 - 1e-9
