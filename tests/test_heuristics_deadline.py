"""Deadlines of the heuristics: the joint count search, the pipeline and the ``best``
portfolio stop at their deadline (at most one chunk of work past it), keep the best found
so far, and are never worse than the rung before them.

Time is a fake clock (``solvers.clock.CLOCK``) that advances only when work
is done: a fixed cost per candidate row the count search packs, and per packing (plus,
where a test says so, per swap step until the deadline). Nothing
here depends on the speed of the machine.
"""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import solvers.clock as solvers_clock
import solvers.deepseek as deepseek
from solvers import Problem
from solvers.clock import FakeClock as StepClock, TimeUp, check_deadline, fake_clock
from solvers.deepseek import deepseek_plan
from solvers.registry import SolverOutput
from solvers.heuristics import joint, packing, pipeline, portfolio
from solvers.heuristics.common import pack_loads, replicate_counts
from solvers.heuristics.pipeline import heuristic_phy2log, layer_times
from solvers.scoring import duplicates_per_row

ROW_SECONDS = 0.001        # fake cost of packing one candidate row in the count search
CALL_SECONDS = 0.002       # fake fixed cost of one batched evaluation (estimates then err)
PACK_SECONDS = 0.01        # fake cost of one packing of the pipeline
DEEP = dict(portfolio.LADDER)["joint_deep"]   # packing-evaluated phase even at many slots per GPU


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Work:
    """The fake clock and a log of the count search's evaluations: (start time, rows, cost)."""

    def __init__(self, monkeypatch, pack_seconds: float = PACK_SECONDS, step_seconds: float = 0.0):
        self.clock = FakeClock()
        self.evals: list[tuple[float, int, float]] = []
        monkeypatch.setattr(solvers_clock, "CLOCK", self.clock)
        quick, pack = joint.quick_objective, pipeline.pack_counts

        def counted_quick(weight, logcnt, num_packs, steps):
            cost = CALL_SECONDS + ROW_SECONDS * weight.shape[0]
            self.evals.append((self.clock.now, weight.shape[0], cost))
            self.clock.now += cost
            return quick(weight, logcnt, num_packs, steps)

        def timed_pack(*args, max_steps, deadline=None, **kwargs):
            # constructions cost pack_seconds, then swap steps step_seconds each until the deadline
            out = pack(*args, max_steps=max_steps, deadline=deadline, **kwargs)
            self.clock.now += pack_seconds
            steps = step_seconds * max_steps
            if deadline is not None:
                steps = min(steps, max(0.0, deadline - self.clock.now))
            self.clock.now += steps
            return out

        monkeypatch.setattr(joint, "quick_objective", counted_quick)
        monkeypatch.setattr(pipeline, "pack_counts", timed_pack)


@pytest.fixture
def work(monkeypatch) -> Work:
    return Work(monkeypatch)


pytestmark = pytest.mark.usefixtures("one_thread")


def loads(layers: int, experts: int, seed: int) -> torch.Tensor:
    """[layers, experts] heavy-tailed loads (a few hot experts)."""
    g = torch.Generator().manual_seed(seed)
    return torch.exp(1.2 * torch.randn(layers, experts, generator=g, dtype=torch.float64)) * 100


def search_input(rows: int = 2, experts: int = 24, slots: int = 40, packs: int = 4):
    """(weight [rows, experts], greedy logcnt [rows, experts], packs): S = slots / packs = 10."""
    w = loads(rows, experts, 0)
    return w, replicate_counts(w, slots), packs


def assert_valid_counts(cnt: torch.Tensor, slots: int):
    assert cnt.dtype == torch.int64
    assert bool((cnt >= 1).all())
    assert cnt.sum(1).tolist() == [slots] * cnt.shape[0]


def test_joint_counts_with_a_past_deadline_evaluates_nothing(work):
    w, cnt, P = search_input()
    work.clock.now = 5.0
    out, rounds = joint.joint_counts(w, cnt, P, deadline=4.0)
    assert rounds == 0 and work.evals == []
    assert torch.equal(out, cnt)


def test_joint_counts_cut_mid_round_stops_within_one_chunk_and_keeps_the_best(work):
    w, cnt, P = search_input()
    X = w.shape[0]
    full_round = X * 4 * 4 * 4                       # rows x beam x donors x receivers
    deadline = 0.04                                  # the first round alone would cost ~0.13
    out, rounds = joint.joint_counts(w, cnt, P, deadline=deadline)
    assert rounds == 1
    initial, *chunks = work.evals
    assert initial[1] == X and chunks, "the round began (time was left) but was cut"
    assert sum(r for _, r, _ in chunks) < full_round
    assert all(start < deadline for start, _, _ in work.evals), "an evaluation started past the deadline"
    assert work.clock.now <= deadline + chunks[-1][2]
    assert_valid_counts(out, 40)
    before = joint.quick_objective(w, cnt, P, 4)
    after = joint.quick_objective(w, out, P, 4)
    assert bool((after <= before).all())


def bound_taking_time(work: Work, bound):
    """fixed_count_bound that costs fake time like a packing (so that rounds get chunked)."""
    def counted(weight, logcnt, num_packs):
        cost = CALL_SECONDS + ROW_SECONDS * weight.shape[0]
        work.evals.append((work.clock.now, weight.shape[0], cost))
        work.clock.now += cost
        return bound(weight, logcnt, num_packs)
    return counted


@pytest.mark.parametrize("evaluate", ["pack", "bound"])
def test_chunked_rounds_find_the_same_counts_as_whole_rounds(work, monkeypatch, evaluate):
    """With time to spare, evaluating a round in many chunks changes nothing."""
    if evaluate == "bound":
        monkeypatch.setattr(joint, "fixed_count_bound", bound_taking_time(work, joint.fixed_count_bound))
    w, cnt, P = search_input()
    whole, whole_rounds = joint.joint_counts(w, cnt, P, rounds=3, evaluate=evaluate)
    calls_whole = len(work.evals)
    assert calls_whole == whole_rounds + 1          # no deadline: one batch per round
    monkeypatch.setattr(joint, "CHUNK_SHARE", 0.0)
    monkeypatch.setattr(joint, "MIN_CHUNK_SECONDS", 0.02)   # ~8 columns of 64 per chunk
    chunked, chunked_rounds = joint.joint_counts(w, cnt, P, rounds=3, evaluate=evaluate, deadline=1e9)
    assert len(work.evals) - calls_whole > 4 * chunked_rounds + 1, "the rounds were not chunked"
    assert chunked_rounds == whole_rounds >= 1
    assert torch.equal(chunked, whole)


def deep_problem(layers: int = 2) -> Problem:
    """32 experts on 4 GPUs with 10 slots each: above PACK_LOOP_MAX_SLOTS, so only the deep
    effort's packing-evaluated phase packs candidates."""
    assert 40 // 4 > pipeline.PACK_LOOP_MAX_SLOTS
    return Problem(loads(layers, 32, 1), 40, 1, 1, 4)


def test_pipeline_packing_phase_stops_at_the_deadline_no_worse_than_without_it(work):
    problem = deep_problem()
    base, _ = heuristic_phy2log(problem, "global", False, replace(DEEP, joint=False))
    work.clock.now, work.evals = 0.0, []
    deadline = 0.3     # the first packing-evaluated round would cost ~L x 144 x ROW_SECONDS
    p2l, info = heuristic_phy2log(problem, "global", False, DEEP, deadline)
    pack_evals = [e for e in work.evals if e[1] > problem.num_layers]   # candidates, not the start
    assert pack_evals, "the packing-evaluated phase began"
    assert info["joint_pack_rounds"] == 1
    assert sum(r for _, r, _ in pack_evals) < problem.num_layers * 6 * 6 * 4
    assert all(start < deadline for start, _, _ in work.evals)
    # the phase's final packing comes after the search: at most one chunk past the deadline
    assert work.clock.now <= deadline + max(c for _, _, c in work.evals)
    counts = torch.nn.functional.one_hot(p2l, problem.num_experts).sum(1)
    assert_valid_counts(counts, problem.num_replicas)
    assert bool((layer_times(problem, p2l) <= layer_times(problem, base)).all())


def test_pipeline_does_not_begin_a_search_with_a_past_deadline(work):
    problem = deep_problem()
    p2l, info = heuristic_phy2log(problem, "global", False, DEEP, deadline=-1.0)
    assert work.evals == [] and "joint_pack_rounds" not in info
    assert p2l.shape == (problem.num_layers, problem.num_replicas)


@pytest.mark.parametrize("time_limit", [0.2, 0.6])
def test_portfolio_respects_its_time_limit_on_the_fake_clock(work, time_limit):
    problem = deep_problem(layers=1)    # its deep search converges after ~0.8 fake seconds
    out = portfolio.run_portfolio(problem, policy="global", nodup=False, relax=0, time_limit=time_limit)
    assert work.clock.now <= time_limit, f"{work.clock.now:.3f} s of work for a {time_limit} s limit"
    assert out.info["rungs_run"][0] == "kk_swap"
    # keep-best: never worse than the first rung's plan, rung by rung
    kk, _ = heuristic_phy2log(problem, "global", False, dict(portfolio.LADDER)["kk_swap"])
    assert bool((layer_times(problem, out.plan.phy2log) <= layer_times(problem, kk)).all())


def test_portfolio_with_time_to_spare_runs_the_whole_ladder_and_the_deep_search(work):
    problem = deep_problem(layers=1)
    out = portfolio.run_portfolio(problem, policy="global", nodup=False, relax=0, time_limit=60.0)
    assert out.info["rungs_run"] == [name for name, _ in portfolio.LADDER]
    assert any(r > problem.num_layers for _, r, _ in work.evals), "the deep rung packed candidates"


class FakeExact:
    """An exact solver spec that records the time limit it is given and spends ``spend`` of
    it (a model too large for its time limit returns at once)."""

    name, kind, requires = "fake_exact", "exact", ""

    def __init__(self, work: Work, spend: float = 1.0):
        self.work, self.spend, self.time_limits = work, spend, []

    def is_available(self) -> bool:
        return True

    def parse(self, options: dict) -> dict:
        return options

    def fn(self, problem, options):
        self.time_limits.append(options["time_limit"])
        self.work.clock.now += self.spend * options["time_limit"]
        return SolverOutput(options["warm_start"], "global")


def test_portfolio_leaves_half_the_budget_to_its_exact_rung(work, monkeypatch):
    exact = FakeExact(work)
    monkeypatch.setattr(portfolio, "get_solver", lambda name: exact)
    problem = deep_problem(layers=1)
    out = portfolio.run_portfolio(problem, policy="global", nodup=False, relax=0, time_limit=1.0, exact="fake")
    assert out.info["rungs_run"][-1] == "fake_exact"
    # the ladder alone would take ~0.7 fake seconds: it is cut at half the budget (documented)
    assert exact.time_limits and exact.time_limits[0] >= 0.5 - 1e-9
    assert work.clock.now <= 1.0 + 1e-9


def test_portfolio_leaves_a_share_of_the_budget_to_the_relaxed_pass(work, monkeypatch):
    import solvers.heuristics.relaxed as relaxed
    began = []
    relax = relaxed.relax_plan

    def timed_relax(*args, **kwargs):
        began.append(work.clock.now)
        return relax(*args, **kwargs)

    monkeypatch.setattr(relaxed, "relax_plan", timed_relax)
    problem = Problem(loads(1, 32, 2), 48, 4, 2, 4)            # 2 nodes, 6 slots per GPU
    portfolio.run_portfolio(problem, policy="hierarchical", nodup=False, relax=2, time_limit=0.5)
    assert began and began[0] <= 0.5 * 0.75        # a quarter of the budget or more is left to it


def test_portfolio_gives_the_time_an_exact_rung_leaves_to_the_rungs_not_run_yet(monkeypatch):
    work = Work(monkeypatch, pack_seconds=0.2)       # a packing costs a fifth of the budget
    exact = FakeExact(work, spend=0.0)
    monkeypatch.setattr(portfolio, "get_solver", lambda name: exact)
    out = portfolio.run_portfolio(deep_problem(layers=1), policy="global", nodup=False, relax=0,
                                  time_limit=1.0, exact="fake")
    ran = out.info["rungs_run"]
    assert ran[:2] == ["kk_swap", "joint"] and ran[2] == "fake_exact", "half the budget: two rungs first"
    assert ran[3:] == ["multi_start", "joint_deep"]
    assert work.clock.now <= 1.0


def test_local_search_checks_its_deadline_before_every_step(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(solvers_clock, "CLOCK", clock)
    calls = []
    for name in ("step_pairs", "step11", "step22"):
        step = getattr(packing._Swapper, name)

        def timed(self, *args, _step=step, _name=name):
            calls.append((_name, clock.now))
            clock.now += 1.0                          # every swap step costs one fake second
            return _step(self, *args)

        monkeypatch.setattr(packing._Swapper, name, timed)
    w = loads(2, 24, 3)
    cnt = replicate_counts(w, 40)
    e_slots, before = packing.pack_counts(w, cnt, 4, starts=("kk",), max_steps=0)
    per = w / cnt
    w_slots = per.gather(1, e_slots)
    w2, e2, steps = packing.local_search(w_slots, e_slots, 4, 24, max_steps=64, deadline=3.5)
    assert [t for _, t in calls] == [0.0, 1.0, 2.0, 3.0]     # a block holds 10 steps: cut inside it
    assert steps == 4
    after = pack_loads(per.gather(1, e2), 4).max(1).values
    assert bool((after <= before * (1 + 1e-12)).all())
    assert torch.equal(e2.sort(1).values, e_slots.sort(1).values)   # the same replicas, moved


def test_portfolio_starts_a_later_rung_whose_first_packing_fits_the_time_left(monkeypatch):
    """multi_start's 256 swap steps take most of the budget; joint_deep still starts (its
    first packing fits the time left) and stops at the deadline."""
    work = Work(monkeypatch, step_seconds=0.001)
    out = portfolio.run_portfolio(deep_problem(layers=1), policy="global", nodup=False, relax=0, time_limit=0.4)
    seconds = out.info["rung_seconds"]
    assert out.info["rungs_run"] == [name for name, _ in portfolio.LADDER]
    started = work.clock.now - seconds["joint_deep"]
    assert seconds["multi_start"] > 0.4 - started, "the previous rung took more than the time left"
    assert work.clock.now <= 0.4


def test_relaxed_pass_stops_at_its_deadline(monkeypatch):
    """relax_plan: no move step starts after the deadline (each step costs fake time), and
    with time it still moves replicas off-node within the budget."""
    from solvers.heuristics import relaxed
    from solvers.registry import run

    g = torch.Generator().manual_seed(5)
    w = torch.exp(2 * torch.randn(3, 32, generator=g, dtype=torch.float64)) * 100
    problem = Problem(w, 48, 4, 2, 8)
    strict = run(problem, "kk_swap", {"policy": "hierarchical"}).plan.phy2log
    clock = FakeClock()
    monkeypatch.setattr(solvers_clock, "CLOCK", clock)
    steps = []
    evaluate = relaxed.evaluate_moves

    def costly(*args):
        steps.append(clock.now)
        clock.now += 0.01
        return evaluate(*args)

    monkeypatch.setattr(relaxed, "evaluate_moves", costly)
    free, info = relaxed.relax_plan(problem, strict, 4)
    assert info["relax_moves"] > 0 and len(steps) > 3
    steps.clear()
    clock.now = 0.0
    cut, info = relaxed.relax_plan(problem, strict, 4, deadline=0.025)
    assert len(steps) == 3 and all(t < 0.025 for t in steps)          # steps at 0, 0.01, 0.02
    assert info["off_node_replicas_worst_layer"] <= 4
    assert bool((layer_times(problem, cut) <= layer_times(problem, strict) * (1 + 1e-12)).all())


def test_greedy_stops_at_its_deadline():
    """deepseek's loops check the deadline every step: with a clock that advances at every
    reading it raises TimeUp (the portfolio's cue to go on without it) and, without a
    deadline, gives the same plan as ever."""
    w = loads(2, 32, 3)
    plain = deepseek_plan(w, 40, 1, 1, 4, "global")
    with fake_clock(StepClock(step=0.001)) as c:
        with pytest.raises(TimeUp):
            deepseek_plan(w, 40, 1, 1, 4, "global", deadline=0.005)
        assert c.now < 0.01                     # stopped within a few steps of the deadline
        again = deepseek_plan(w, 40, 1, 1, 4, "global", deadline=1e9)
    assert torch.equal(again.phy2log, plain.phy2log)


def test_portfolio_goes_on_without_a_greedy_that_misses_the_deadline(monkeypatch):
    """A machine too loaded for the greedy: its steps cost 0.01 fake seconds each (48 steps
    here), the budget is 0.2 s. The greedy is dropped, the time limit holds, the first
    rung's plan is returned."""
    work = Work(monkeypatch)

    def slow_check(deadline):
        work.clock.now += 0.01
        check_deadline(deadline)

    monkeypatch.setattr(deepseek, "check_deadline", slow_check)
    problem = deep_problem(layers=2)
    out = portfolio.run_portfolio(problem, policy="global", nodup=False, relax=0, time_limit=0.2)
    assert out.info["greedy"] == "timed out"
    assert out.info["rungs_run"][0] == "kk_swap" and "deepseek" not in out.info["layers_won"]
    assert work.clock.now <= 0.2 + 0.01 + 1e-9            # at most one greedy step past it
    problem.validate_plan(out.plan)


def test_portfolio_with_time_for_the_greedy_is_never_worse_than_it(monkeypatch):
    """The same, with a greedy that fits: it is kept, and every layer is at most its value."""
    work = Work(monkeypatch)

    def step(deadline):
        work.clock.now += 0.001
        check_deadline(deadline)

    monkeypatch.setattr(deepseek, "check_deadline", step)
    problem = deep_problem(layers=2)
    out = portfolio.run_portfolio(problem, policy="global", nodup=False, relax=0, time_limit=1.0)
    assert out.info["greedy"] == "kept"
    greedy = pipeline.greedy_phy2log(problem, "global")
    assert bool((layer_times(problem, out.plan.phy2log) <= layer_times(problem, greedy) * (1 + 1e-12)).all())
    assert work.clock.now <= 1.0


def test_constructions_stop_at_their_deadline_and_are_unchanged_without_one():
    """kk and lpt at one GPU of 512 slots (511 merges, 512 placements): on a clock advancing
    1 ms per reading they raise TimeUp a few checks past the deadline; with no deadline (or
    one far away) they give the same packing as before."""
    item_w = torch.rand(3, 512, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    item_e = torch.arange(512).expand(3, 512)
    plain_kk = packing.kk_pack(item_w, 4)
    plain_lpt = packing.lpt_pack(item_w, item_e, 4, 512)
    for build in (lambda d: packing.kk_pack(item_w, 4, deadline=d),
                  lambda d: packing.lpt_pack(item_w, item_e, 4, 512, deadline=d)):
        with fake_clock(StepClock(step=0.001)) as c:
            with pytest.raises(TimeUp):
                build(0.005)
            assert c.now <= 0.005 + 0.001 + 1e-12        # stopped at the first check past it
    with fake_clock(StepClock(step=0.001)):
        assert torch.equal(packing.kk_pack(item_w, 4, deadline=1e9), plain_kk)
        assert torch.equal(packing.lpt_pack(item_w, item_e, 4, 512, deadline=1e9), plain_lpt)


@pytest.mark.parametrize("nodup", [False, True])
def test_pack_counts_past_its_deadline_still_returns_a_full_packing(nodup):
    """Every construction cut: pack_counts falls back to the round-robin layout, every GPU
    holds exactly its slots, every replica is kept (and none duplicated under nodup)."""
    w = loads(2, 16, 3).to(torch.float64)
    cnt = replicate_counts(w, 64, 4 if nodup else None)
    with fake_clock(StepClock(step=1.0)):                  # every check is past the deadline
        e_slots, obj = packing.pack_counts(w, cnt, 4, nodup=nodup, starts=("kk", "lpt"), deadline=0.5)
    assert e_slots.shape == (2, 64)
    assert torch.equal(torch.nn.functional.one_hot(e_slots, 16).sum(1), cnt)     # every replica placed
    assert bool(torch.isfinite(obj).all())
    if nodup:
        assert int(duplicates_per_row(e_slots, 4).sum()) == 0
    ref, ref_obj = packing.pack_counts(w, cnt, 4, nodup=nodup, starts=("rr",), max_steps=0)
    assert torch.equal(e_slots, ref) and torch.equal(obj, ref_obj)   # the rr layout (no search time left)


def test_portfolio_keeps_its_limit_at_one_gpu_of_many_slots(monkeypatch):
    """The work model's case: 1 x 8 experts on one GPU of 1024 slots, where the first rung's
    differencing has 1023 merge steps and the greedy 1016 replication steps. On a fake clock
    charging 10 ms per packing check (every DEADLINE_EVERY merges) and 1 ms per greedy step,
    both exceed a 0.2 s budget: the construction is cut, the greedy dropped, and the portfolio
    returns a valid plan within one check of its limit."""
    work = Work(monkeypatch)
    checks = {0.01: 0, 0.001: 0}

    def charged(cost):
        def check(deadline):
            checks[cost] += 1
            work.clock.now += cost
            check_deadline(deadline)
        return check

    monkeypatch.setattr(packing, "check_deadline", charged(0.01))
    monkeypatch.setattr(deepseek, "check_deadline", charged(0.001))
    problem = Problem(loads(1, 8, 5), 1024, 1, 1, 1)
    out = portfolio.run_portfolio(problem, policy="global", nodup=False, relax=0, time_limit=0.2)
    assert out.info["greedy"] == "timed out"
    assert work.clock.now <= 0.2 + 0.01 + 1e-9
    assert 0 < checks[0.01] < 1023 // packing.DEADLINE_EVERY       # the differencing was cut
    problem.validate_plan(out.plan)
