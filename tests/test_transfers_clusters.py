"""Transfer schedules between plans of different slot maps: GPUs failed (shrink), failed GPUs
back (re-grow), uneven slot counts; through the library and through `eplb score`."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from benchmarks.transfers import check_schedule
from solvers import Plan, Problem, score
from solvers.cli import main
from solvers.cluster import Cluster
from solvers.network import Network
from solvers.transfers import NoSourceError, exact_schedule, schedule_transfers
from solvers.transfers.schedule import needed_copies

from test_cli import W, one_error_line, write

B = 1_000_000
E = 12
P, Q = 8, 4                                     # 2 nodes of 4 GPUs
WHOLE = Cluster(2, P, 24)                       # 3 slots per GPU
SHRUNK = Cluster(2, P, 24, failed=[1, 6])       # 18 live slots
UNEVEN = Cluster(2, P, gpu_slots=[4, 2, 3, 3, 5, 1, 3, 3])   # 24 slots on other GPUs


def random_plan(seed: int, cluster: Cluster, L: int = 3) -> Plan:
    """A valid plan of ``cluster``'s slots: every expert once, the rest at random."""
    g = torch.Generator().manual_seed(seed)
    R = cluster.num_replicas
    rows = [torch.cat([torch.arange(E), torch.randint(0, E, (R - E,), generator=g)])[torch.randperm(R, generator=g)]
            for _ in range(L)]
    return Plan.from_phy2log(torch.stack(rows), E)


def held(plan: Plan, cluster: Cluster) -> set[tuple[int, int, int]]:
    """(layer, GPU, expert) of every replica, the GPU by the cluster's slot map."""
    gpu = cluster.slot_gpus()
    return {(layer, gpu[r], int(e)) for layer, row in enumerate(plan.phy2log.tolist()) for r, e in enumerate(row)}


def scorer_moves(old: Plan, old_cluster: Cluster, new: Plan, new_cluster: Cluster) -> int:
    problem = Problem(torch.ones(old.num_layers, E), cluster=new_cluster)
    return score(problem, new, previous=old, previous_cluster=old_cluster).moves


def schedule(old, old_cluster, new, new_cluster, network, model="rounds"):
    return schedule_transfers(old, new, P, Q, B, network, num_experts=E, model=model,
                              slot_gpu=new_cluster.slot_gpus(), previous_slot_gpu=old_cluster.slot_gpus())


CHANGES = {"shrink": (WHOLE, SHRUNK), "regrow": (SHRUNK, WHOLE), "uneven": (WHOLE, UNEVEN),
           "uneven_shrink": (UNEVEN, SHRUNK)}


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("model", ["rounds", "shared"])
def test_copies_are_the_scorers_moves_from_live_holders(change, model):
    old_c, new_c = CHANGES[change]
    net = Network(300e9, 25e9, 40e9)                     # host memory: every copy has a source
    for seed in range(4):
        old, new = random_plan(seed, old_c), random_plan(100 + seed, new_c)
        sched = schedule(old, old_c, new, new_c, net, model)
        if model == "rounds":                               # rounds are matchings; shared copies all overlap
            check_schedule(sched)
        assert sched.moves == scorer_moves(old, old_c, new, new_c) > 0
        before, after = held(old, old_c), held(new, new_c)
        copies = {(int(l), int(g), int(e)) for l, g, e in zip(sched.copies.layer, sched.copies.dst,
                                                              sched.copies.expert)}
        assert copies == after - before                     # the pairs new to a GPU, each once
        live = set(new_c.live_gpus)
        for layer, expert, src in zip(sched.copies.layer.tolist(), sched.copies.expert.tolist(), sched.src.tolist()):
            if src >= 0:                                    # a GPU source: live, and held it before
                assert src in live and (layer, src, expert) in before
        assert sched.bound <= sched.makespan * (1 + 1e-12)
        assert sched.bounds["any_source"] <= sched.makespan * (1 + 1e-12)


def test_shrink_without_host_memory_names_the_copies_without_source():
    old, new = random_plan(0, WHOLE), random_plan(1, SHRUNK)
    copies = needed_copies(old, new, P, Q, E, SHRUNK.slot_gpus(), WHOLE.slot_gpus())
    orphans = ~copies.candidates.any(1)
    # the failed GPUs held some experts' only replicas: those copies have no GPU source
    assert orphans.any() and not copies.candidates[:, list(SHRUNK.failed)].any()
    for model in ("rounds", "shared"):
        with pytest.raises(NoSourceError, match=f"{int(orphans.sum())} of {len(copies)} copies have no source") as err:
            schedule(old, WHOLE, new, SHRUNK, Network(), model)
        assert err.value.param == "host_bw"
    with pytest.raises(NoSourceError):                  # the exact model takes the same copies, and the rule
        exact_schedule(copies, Network(), B)
    # a planner timing the network's part leaves them out, and counts them
    part = schedule_transfers(old, new, P, Q, B, num_experts=E, slot_gpu=SHRUNK.slot_gpus(),
                              previous_slot_gpu=WHOLE.slot_gpus(), skip_unsourced=True)
    assert part.info["copies_unsourced"] == int(orphans.sum()) and part.moves == len(copies) - int(orphans.sum())
    assert part.summary()["copies_unsourced"] == int(orphans.sum()) and part.copies.candidates.any(1).all()
    # with host memory those copies come from it, and only those must
    sched = schedule(old, WHOLE, new, SHRUNK, Network(host_bw=1e9))     # slow host: only when needed
    check_schedule(sched)
    assert np.all(sched.src[orphans] == -1) and np.all(sched.src[~orphans] >= 0)


def test_regrow_fills_the_returning_gpus_from_the_live_ones():
    old, new = random_plan(2, SHRUNK), random_plan(3, WHOLE)
    sched = schedule(old, SHRUNK, new, WHOLE, Network())      # no host memory: every expert is live somewhere
    check_schedule(sched)
    back = list(SHRUNK.failed)
    # a GPU back from a failure starts empty: each distinct expert it gets is a copy
    for g in back:
        want = {(layer, int(e)) for layer in range(3) for e in new.phy2log[layer, 3 * g:3 * g + 3].tolist()}
        got = {(int(layer), int(e)) for layer, e, d in zip(sched.copies.layer, sched.copies.expert, sched.copies.dst)
               if d == g}
        assert got == want
    assert not np.isin(sched.src, back).any()
    assert sched.moves == scorer_moves(old, SHRUNK, new, WHOLE)


@pytest.mark.parametrize("change", ["shrink", "regrow", "uneven"])
def test_exact_schedule_takes_the_same_copies(change):
    old_c, new_c = CHANGES[change]
    old, new = random_plan(4, old_c, L=1), random_plan(5, new_c, L=1)
    net = Network(400e9, 50e9, 55e9)
    heur = schedule(old, old_c, new, new_c, net)
    exact = exact_schedule(heur.copies, net, B, time_limit=20, hint=heur)
    check_schedule(exact)
    assert exact.moves == heur.moves == scorer_moves(old, old_c, new, new_c)
    assert exact.makespan <= heur.makespan * (1 + 1e-12)
    assert exact.info["exact_bound_seconds"] <= exact.makespan * (1 + 1e-6)


def test_slot_maps_are_checked():
    old, new = random_plan(0, WHOLE), random_plan(1, SHRUNK)
    with pytest.raises(ValueError, match="slot_gpu"):
        needed_copies(old, new, P, Q, E, WHOLE.slot_gpus(), WHOLE.slot_gpus())        # 24 GPUs for 18 slots
    with pytest.raises(ValueError, match="previous"):
        needed_copies(old, new, P, Q, E, SHRUNK.slot_gpus())          # the plan in force's slots are others
    with pytest.raises(ValueError, match="previous_slot_gpu"):
        needed_copies(old, new, P, Q, E, SHRUNK.slot_gpus(), [0] * 23 + [P])


# Through the CLI ---------------------------------------------------------------------------

SHAPE = ["--replicas", "16", "--groups", "4", "--nodes", "2", "--gpus", "8"]


@pytest.fixture
def cluster_plans(tmp_path, capsys):
    """The plan in force on 8 GPUs, a re-plan after GPUs 1 and 5 failed, and one on uneven slots."""
    loads = write(tmp_path / "w.json", W)
    base, shrunk, uneven = tmp_path / "base.json", tmp_path / "shrunk.json", tmp_path / "uneven.json"
    assert main(["plan", "--loads", str(loads), *SHAPE, "--solver", "kk_swap", "--out", str(base)]) == 0
    assert main(["plan", "--loads", str(loads), *SHAPE, "--failed", "1,5", "--solver", "kk_swap",
                 "--previous", str(base), "--migration-slack", "0.05", "--out", str(shrunk)]) == 0
    # uneven: the same 16 slots, on other GPUs; migration-aware, so few pairs move (by the right map)
    assert main(["plan", "--loads", str(loads), "--groups", "4", "--nodes", "2", "--gpus", "8", "--gpu-slots",
                 "1,3,1,3,3,1,3,1", "--solver", "kk_swap", "--previous", str(base), "--migration-slack", "0.05",
                 "--out", str(uneven)]) == 0
    capsys.readouterr()
    return loads, base, shrunk, uneven


def _score(capsys, loads, plan, previous, *extra):
    argv = ["score", "--loads", str(loads), "--plan", str(plan), "--previous", str(previous), "--expert-bytes",
            str(B), *extra]
    assert main(argv + ["--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    return m, capsys.readouterr().out


def _schedule_file(path):
    return list(csv.DictReader(path.open())) if path.suffix == ".csv" else json.loads(path.read_text())["copies"]


@pytest.mark.parametrize("change", ["shrink", "regrow", "uneven"])
def test_score_writes_schedules_across_cluster_changes(tmp_path, capsys, cluster_plans, change):
    loads, base, shrunk, uneven = cluster_plans
    plan, previous = {"shrink": (shrunk, base), "regrow": (base, shrunk), "uneven": (uneven, base)}[change]
    host = ["--host-bw", "20"] if change == "shrink" else []       # GPUs 1 and 5 may have held an only replica
    m, text = _score(capsys, loads, plan, previous, *host)
    t = m["transfers"]
    assert t["moves"] == m["moves"] > 0 and t["bytes"] == m["moves_bytes"]
    assert t["bound_seconds"] <= t["makespan_seconds"] * (1 + 1e-12)
    assert f"transfers: {m['moves']} copies" in text and "no schedule" not in text
    out = tmp_path / f"{change}.csv"
    assert main(["score", "--loads", str(loads), "--plan", str(plan), "--previous", str(previous),
                 "--expert-bytes", str(B), *host, "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    rows = _schedule_file(out)
    assert len(rows) == m["moves"]
    # every GPU source is live now and held the expert in the plan in force
    prev_doc, new_doc = json.loads(previous.read_text()), json.loads(plan.read_text())
    before = held(Plan.from_phy2log(torch.tensor(prev_doc["phy2log"]), 12), _doc_cluster(prev_doc))
    failed_now = set(_doc_cluster(new_doc).failed)
    for r in rows:
        src = int(r["src_gpu"])
        assert src == -1 or ((int(r["layer"]), src, int(r["expert"])) in before and src not in failed_now)
    assert not list(tmp_path.glob(".eplb-*"))                      # written through safewrite: no leftovers


def _doc_cluster(doc) -> Cluster:
    p = doc["problem"]
    return Cluster(p["num_nodes"], p["num_gpus"], p["num_replicas"], gpu_slots=p.get("gpu_slots"))


def test_score_says_why_there_is_no_schedule(tmp_path, capsys, cluster_plans):
    loads, base, shrunk, _ = cluster_plans
    prev_doc, new_doc = json.loads(base.read_text()), json.loads(shrunk.read_text())
    old = Plan.from_phy2log(torch.tensor(prev_doc["phy2log"]), 12)
    new = Plan.from_phy2log(torch.tensor(new_doc["phy2log"]), 12)
    copies = needed_copies(old, new, 8, 4, 12, _doc_cluster(new_doc).slot_gpus(), _doc_cluster(prev_doc).slot_gpus())
    orphans = int((~copies.candidates.any(1)).sum())
    assert orphans > 0             # GPUs 1 and 5 held some experts' only replicas
    m, text = _score(capsys, loads, shrunk, base)
    # no host memory: one line says why there is no schedule, and how to get one
    assert "transfers" not in m and "--host-bw" in m["transfers_unavailable"]
    line = [x for x in text.splitlines() if x.startswith("transfers:")]
    assert len(line) == 1 and line[0].startswith(f"transfers: no schedule: {orphans} of {len(copies)} copies")
    one_error_line(capsys, ["score", "--loads", str(loads), "--plan", str(shrunk), "--previous", str(base),
                            "--expert-bytes", str(B), "--out", str(tmp_path / "s.json")], "--host-bw")
    assert not (tmp_path / "s.json").exists()
    # no expert size: the line says what is missing instead of printing nothing
    assert main(["score", "--loads", str(loads), "--plan", str(shrunk), "--previous", str(base)]) == 0
    assert "transfers: no schedule: the bytes of one expert are unknown" in capsys.readouterr().out


def test_score_counts_uneven_slots_by_each_plans_own_map(tmp_path, capsys, cluster_plans):
    """An uneven plan with the same number of slots (16) as the plan in force: the plan in
    force's slots still map by its own cluster (2 per GPU), not by the new one's."""
    loads, base, _, uneven = cluster_plans
    m, _ = _score(capsys, loads, uneven, base)
    prev_doc, new_doc = json.loads(base.read_text()), json.loads(uneven.read_text())
    before = held(Plan.from_phy2log(torch.tensor(prev_doc["phy2log"]), 12), _doc_cluster(prev_doc))
    after = held(Plan.from_phy2log(torch.tensor(new_doc["phy2log"]), 12), _doc_cluster(new_doc))
    assert m["moves"] == len(after - before) == m["transfers"]["moves"]
