"""Two slots per GPU: the largest-with-smallest pairing is optimal for a fixed multiset (checked
against every pairing), the count search never raises its value and respects caps and
deadlines, and kk_swap improves on the greedy with it."""
from __future__ import annotations

import torch

from solvers import Problem, solve
from solvers.clock import FakeClock, fake_clock
from solvers.heuristics.common import replicate_counts
from solvers.heuristics.pairing import counts_pair_value, pair_counts


# the reference the solver's counts_pair_value is checked against: the R replicas listed
def sorted_items(weight: torch.Tensor, counts: torch.Tensor, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Replica loads in descending order and their experts: weight, counts [N, E] -> ([N, R], [N, R])."""
    N = weight.shape[0]
    v, order = (weight / counts).sort(1, descending=True)
    ends = counts.gather(1, order).cumsum(1)
    idx = torch.searchsorted(ends, torch.arange(num_slots, device=weight.device).expand(N, num_slots).contiguous(),
                             right=True)
    return v.gather(1, idx), order.gather(1, idx)


def pair_value(items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Largest pair sum of the largest-with-smallest pairing: items [N, R] descending ->
    (value [N], index i [N] of the bottleneck pair (i, R-1-i))."""
    R = items.shape[1]
    return (items[:, :R // 2] + items.flip(1)[:, :R // 2]).max(1)


def _matchings(items):
    """Every perfect matching of a list (as lists of pairs)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for k in range(len(rest)):
        for m in _matchings(rest[:k] + rest[k + 1:]):
            yield [(first, rest[k])] + m


def test_largest_with_smallest_is_the_best_pairing():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        a = torch.rand(8, generator=g, dtype=torch.float64).sort(descending=True).values
        best = min(max(x + y for x, y in m) for m in _matchings(a.tolist()))
        assert float(pair_value(a.unsqueeze(0))[0][0]) == best


def test_sorted_items_expand_counts():
    items, experts = sorted_items(torch.tensor([[6.0, 1.0, 4.0]]), torch.tensor([[3, 1, 2]]), 6)
    assert items.tolist() == [[2.0, 2.0, 2.0, 2.0, 2.0, 1.0]]
    assert sorted(experts[0].tolist()) == [0, 0, 0, 1, 2, 2]


def _weights(L=6, E=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.exp(torch.randn(L, E, generator=g, dtype=torch.float64)) * 100


def test_pair_counts_never_raise_the_pairing_value_and_keep_the_slots():
    w = _weights()
    start = replicate_counts(w, 64, 12)
    out, rounds = pair_counts(w, start, cap=12)
    before = pair_value(sorted_items(w, start, 64)[0])[0]
    after = pair_value(sorted_items(w, out, 64)[0])[0]
    assert rounds >= 1
    assert bool((after <= before).all()) and bool((after < before * (1 - 1e-6)).any())
    assert torch.equal(out.sum(1), torch.full((6,), 64)) and int(out.min()) >= 1 and int(out.max()) <= 12


def test_pair_counts_check_the_deadline_before_every_round():
    w = _weights()
    start = replicate_counts(w, 64, None)
    with fake_clock(FakeClock(start=10.0)):
        out, rounds = pair_counts(w, start, deadline=5.0)
    assert rounds == 0 and torch.equal(out, start)


def test_kk_swap_at_two_slots_per_gpu_beats_the_greedy():
    p = Problem(_weights(L=4, E=32), 64, 1, 1, 32)
    greedy, kk = solve(p, "deepseek"), solve(p, "kk_swap")
    assert kk.info["pair_rounds"] >= 1
    assert bool((kk.objective <= greedy.objective).all())
    assert kk.score.imbalance_mean < greedy.score.imbalance_mean - 0.005


def test_pair_value_from_counts_equals_the_value_of_the_listed_replicas():
    """counts_pair_value (E run ends) = pair_value of the R replicas listed and sorted, ties
    included, and its bottleneck experts' loads add up to it."""
    g = torch.Generator().manual_seed(3)
    for t in range(60):
        E = int(torch.randint(2, 16, (1,), generator=g))
        R = 2 * int(torch.randint((E + 1) // 2, 2 * E, (1,), generator=g))
        w = torch.exp(torch.randn(4, E, generator=g, dtype=torch.float64)) * 100
        if t % 2:
            w = torch.round(w / 50) * 50 + 1                        # many equal loads
        c = torch.ones(4, E, dtype=torch.int64)
        for r in range(4):
            c[r] += torch.bincount(torch.randint(0, E, (R - E,), generator=g), minlength=E)
        value, hi, lo = counts_pair_value(w, c, R)
        assert torch.allclose(value, pair_value(sorted_items(w, c, R)[0])[0], rtol=0, atol=1e-9)
        per = w / c
        assert torch.allclose(per.gather(1, hi[:, None])[:, 0] + per.gather(1, lo[:, None])[:, 0], value)


def test_pair_counts_end_where_no_single_move_lowers_the_value():
    """The chunked search stops only when no move of one replica to the bottleneck pair,
    from any expert, lowers the value (checked here by valuing every move)."""
    w = _weights(L=3, E=12, seed=4)
    out, _ = pair_counts(w, replicate_counts(w, 32), chunk=3)
    value, hi, lo = counts_pair_value(w, out, 32)
    for r in range(3):
        for recv in (int(hi[r]), int(lo[r])):
            for d in range(12):
                c = out[r].clone()
                if d == recv or c[d] < 2:
                    continue
                c[d] -= 1
                c[recv] += 1
                assert float(counts_pair_value(w[r:r + 1], c[None], 32)[0][0]) >= float(value[r]) * (1 - 1e-12)
