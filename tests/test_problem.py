"""Every invalid problem input raises a ValueError subclass naming the parameter."""
import numpy as np
import pytest
import torch

from solvers import EPLBError, Problem, ProblemError, rebalance_experts

W = [[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]]


@pytest.mark.parametrize("weights,param,fragment", [
    ([1.0, 2.0, 3.0], "weights", "2-D"),
    ([[[1.0]]], "weights", "2-D"),
    (np.zeros((0, 4)), "weights", "empty"),
    (np.zeros((2, 0)), "weights", "empty"),
    ([[1.0, -2.0, 3.0, 4.0]], "weights", ">= 0"),
    ([[1.0, float("nan"), 3.0, 4.0]], "weights", "NaN"),
    ([[1.0, float("inf"), 3.0, 4.0]], "weights", "infinite"),
    ([[1.0, 2.0], [3.0]], "weights", "rectangular"),
    ([["a", "b", "c", "d"]], "weights", "numbers"),
    (torch.tensor([[True, False, True, False]]), "weights", "real"),
])
def test_bad_weights(weights, param, fragment):
    with pytest.raises(ProblemError, match=fragment) as err:
        Problem(weights, 4, 1, 1, 1)
    assert err.value.param == param and str(err.value).startswith(param)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("kwargs,param,fragment", [
    (dict(num_replicas=3), "num_replicas", ">= the number of experts"),
    (dict(num_replicas=6, num_gpus=4), "num_replicas", "multiple of num_gpus"),
    (dict(num_replicas=8, num_gpus=4, num_nodes=3), "num_gpus", "multiple of num_nodes"),
    (dict(num_replicas=0), "num_replicas", ">= 1"),
    (dict(num_replicas=-8), "num_replicas", ">= 1"),
    (dict(num_replicas=8, num_gpus=0), "num_gpus", ">= 1"),
    (dict(num_replicas=8, num_nodes=-1), "num_nodes", ">= 1"),
    (dict(num_replicas=8, num_groups=0), "num_groups", ">= 1"),
    (dict(num_replicas=8, num_groups=5), "num_groups", "<= the number of experts"),
    (dict(num_replicas=8.0), "num_replicas", "integer"),
    (dict(num_replicas=8.5), "num_replicas", "integer"),
    (dict(num_replicas="8"), "num_replicas", "integer"),
    (dict(num_replicas=True), "num_replicas", "integer"),
    (dict(num_replicas=8, num_gpus=None), "num_gpus", "integer"),
])
def test_bad_counts(kwargs, param, fragment):
    args = dict(num_replicas=8, num_groups=1, num_nodes=1, num_gpus=1)
    args.update(kwargs)
    with pytest.raises(ProblemError, match=fragment) as err:
        Problem(W, **args)
    assert err.value.param == param


def test_hierarchical_rules_apply_only_where_the_policy_needs_them():
    w = np.ones((1, 6))
    p = Problem(w, 8, 4, 2, 4)            # 6 experts do not split into 4 groups
    with pytest.raises(ProblemError, match="multiple of num_groups") as err:
        p.resolve_policy("auto")         # G % N == 0, so auto means hierarchical
    assert err.value.param == "num_groups"
    assert p.resolve_policy("global") == "global"
    with pytest.raises(ProblemError, match="multiple of num_nodes"):
        Problem(np.ones((1, 6)), 8, 3, 2, 4).resolve_policy("hierarchical")
    with pytest.raises(ProblemError, match="policy"):
        p.resolve_policy("greedy")


def test_numpy_integers_and_int_tensors_are_counts():
    p = Problem(W, np.int64(8), np.int32(2), torch.tensor(1), 2)
    assert (p.num_replicas, p.num_groups, p.num_nodes, p.num_gpus) == (8, 2, 1, 2)
    assert p.slots_per_gpu == 4 and p.gpus_per_node == 2


def test_weights_keep_precision_and_device():
    assert Problem(np.ones((1, 4), dtype=np.float32), 4).weights.dtype == torch.float32
    assert Problem([[1, 2, 3, 4]], 4).weights.dtype == torch.float64
    big = 2**40 + 1   # integer counts stay exact
    assert Problem([[big, 1, 1, 1]], 4).weights[0, 0].item() == big


def test_drop_in_validates_the_same_way():
    with pytest.raises(ProblemError, match="num_replicas"):
        rebalance_experts(W, 3, 1, 1, 1)
    with pytest.raises(EPLBError, match="weight"):
        rebalance_experts([[1.0, float("nan")]], 2, 1, 1, 1)
    with pytest.raises(ProblemError, match="policy"):
        rebalance_experts(W, 4, 1, 1, 1, policy="fastest")


def test_loads_overflowing_float32_are_rejected():
    with pytest.raises(ProblemError, match="too large") as err:
        Problem(torch.full((1, 8), 2e38, dtype=torch.float64), 8, 2, 1, 2)
    assert err.value.param == "weights"
    with pytest.raises(ProblemError, match="too large"):
        rebalance_experts(np.full((1, 4), 1e300), 4, 1, 1, 2)
