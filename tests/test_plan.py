"""Plan validity checks catch every kind of corruption."""
import pytest
import torch

from solvers import Plan, PlanError, rebalance_experts

W = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86]]


def good():
    return Plan(*rebalance_experts(W, 16, 4, 2, 8))


def test_from_phy2log_round_trip():
    plan = good()
    rebuilt = Plan.from_phy2log(plan.phy2log, 12).validate(1, 12, 16, 8)
    assert torch.equal(rebuilt.logcnt, plan.logcnt) and torch.equal(rebuilt.phy2log, plan.phy2log)
    # ranks follow slot order in a rebuilt plan
    for e in range(12):
        slots = rebuilt.log2phy[0, e][rebuilt.log2phy[0, e] >= 0].tolist()
        assert slots == sorted(slots) == [s for s in range(16) if plan.phy2log[0, s] == e]


def corrupt(mutator):
    p = good()
    p2l, l2p, cnt = p.phy2log.clone(), p.log2phy.clone(), p.logcnt.clone()
    mutator(p2l, l2p, cnt)
    return Plan(p2l, l2p, cnt)


@pytest.mark.parametrize("mutator,param", [
    (lambda p2l, l2p, cnt: p2l.__setitem__((0, 0), 12), "phy2log"),
    (lambda p2l, l2p, cnt: p2l.__setitem__((0, 0), -1), "phy2log"),
    (lambda p2l, l2p, cnt: cnt.__setitem__((0, 0), 0), "logcnt"),
    (lambda p2l, l2p, cnt: cnt.__setitem__((0, 1), cnt[0, 1] + 1), "logcnt"),
    (lambda p2l, l2p, cnt: l2p.__setitem__((0, 0, 1), 3), "log2phy"),          # padding not -1
    (lambda p2l, l2p, cnt: l2p.__setitem__((0, 0, 0), 16), "log2phy"),         # slot out of range
    (lambda p2l, l2p, cnt: l2p.__setitem__((0, 0, 0), int(l2p[0, 2, 0])), "log2phy"),  # wrong owner
])
def test_corruptions_are_caught(mutator, param):
    with pytest.raises(PlanError) as err:
        corrupt(mutator).validate(1, 12, 16, 8)
    assert err.value.param == param


def test_swapped_counts_and_experts_are_caught():
    # two experts' phy2log entries swapped: counts no longer match phy2log
    def swap(p2l, l2p, cnt):
        p2l[0][p2l[0] == 1] = 0
    with pytest.raises(PlanError, match="logcnt"):
        corrupt(swap).validate()


def test_sizes_must_fit_the_problem():
    p = good()
    with pytest.raises(PlanError, match="num_replicas"):
        p.validate(num_replicas=32)
    with pytest.raises(PlanError, match="num_gpus"):
        p.validate(num_gpus=3)
    with pytest.raises(PlanError, match="num_experts"):
        p.validate(num_experts=13)
    with pytest.raises(PlanError, match="integers"):
        Plan.from_tensors(p.phy2log.float(), p.log2phy, p.logcnt)
    with pytest.raises(PlanError, match="in \\[0, 12\\)"):
        Plan.from_phy2log([[0, 1, 12]], 12)


def test_wider_padding_is_accepted():
    p = good()
    padded = torch.cat([p.log2phy, torch.full((1, 12, 1), -1)], dim=2)
    Plan(p.phy2log, padded, p.logcnt).validate(1, 12, 16, 8)


def test_replicas_ranked_out_of_slot_order_are_valid_and_still_checked():
    """validate's fast path accepts the slot-ordered log2phy by one comparison; any other
    order of an expert's replicas goes through every check (valid here, and a duplicate
    slot caught)."""
    p = Plan.from_phy2log(good().phy2log, 12)
    e = int(torch.argmax(p.logcnt[0]))
    assert int(p.logcnt[0, e]) >= 2
    l2p = p.log2phy.clone()
    l2p[0, e, 0], l2p[0, e, 1] = p.log2phy[0, e, 1], p.log2phy[0, e, 0]
    Plan(p.phy2log, l2p, p.logcnt).validate(1, 12, 16, 8)
    l2p[0, e, 1] = l2p[0, e, 0]                                   # one slot listed twice
    with pytest.raises(PlanError, match="log2phy"):
        Plan(p.phy2log, l2p, p.logcnt).validate(1, 12, 16, 8)
