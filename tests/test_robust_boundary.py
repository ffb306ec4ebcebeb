"""The guarded boundary (solvers.filecheck), exact rescaling of extreme loads, writes that
cannot hurt (solvers.safewrite) and solver scratch directories (solvers.childproc)."""
from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

from solvers import Cluster, Problem, score, solve
from solvers import childproc, filecheck
from solvers.dynamics import simulate
from solvers.errors import LoadFileError, ProblemError
from solvers.io import read_loads, rescale_extreme
from solvers.registry import get_solver
from solvers.safewrite import write_atomic, write_text_atomic


# ---------------------------------------------------------------------------------------
# Tensors and archives

@pytest.mark.parametrize("make, fragment", [
    (lambda: torch.ones(2, 4).to(torch.float8_e5m2), "float8"),
    (lambda: torch.ones(2, 4, dtype=torch.complex128), "complex"),
    (lambda: torch.ones(2, 4, dtype=torch.bool), "boolean"),
    (lambda: torch.empty(2, 4, device="meta"), "meta"),
    (lambda: torch.ones(2, 4).to_sparse(), "sparse"),
    (lambda: torch.ones(1, 4).expand(1000, 4), "stride of 0"),
    (lambda: torch.ones(8).as_strided((4, 4), (1, 1)), "overlapping"),
])
def test_tensors_the_checks_never_imagined_are_refused_by_name(make, fragment):
    with pytest.raises(LoadFileError) as err:
        filecheck.check_tensors({"records": [{"global_physical_count": make()}]}, "x.pt")
    assert fragment in str(err.value) and "records[0].global_physical_count" in str(err.value)


def test_dense_views_pass():
    t = torch.arange(24.0).view(4, 6)
    filecheck.check_tensors({"a": t.t(), "b": t[:, ::2], "c": t[1:3]}, "x.pt")


def test_zip_members_are_sized_before_inflating(tmp_path, monkeypatch):
    monkeypatch.setattr(filecheck, "BOMB_MIN_BYTES", 1 << 20)
    path = tmp_path / "b.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("loads.npy", b"\0" * (8 << 20))
    with pytest.raises(LoadFileError, match="decompression bomb"):
        read_loads(path)
    monkeypatch.setattr(filecheck, "MAX_UNPACKED_BYTES", 1 << 10)
    np.savez(tmp_path / "ok.npz", loads=np.ones((64, 64)))
    with pytest.raises(LoadFileError, match="decompress to"):
        read_loads(tmp_path / "ok.npz")


def test_metadata_is_checked_against_its_schema():
    assert filecheck.check_meta({"model": "x", "num_groups": 8, "extra": [1, {"a": None}]}, "f") is not None
    for meta, fragment in [([1], "must be a JSON object"), ({"num_groups": "8"}, "meta.num_groups"),
                           ({"top_k": 0}, "meta.top_k"), ({"a": float("nan")}, "meta.a"),
                           ({"a": [[[[[[[[[[1]]]]]]]]]]}, "nested deeper"), ({"seed": True}, "meta.seed")]:
        with pytest.raises(LoadFileError, match=fragment.replace("[", r"\[")):
            filecheck.check_meta(meta, "f")


def test_yaml_depth_aliases_and_non_finite_keys():
    assert filecheck.safe_yaml("a: {0: [1, 2]}\n", "p.yaml") == {"a": {0: [1, 2]}}
    for text, fragment in [("a: " + "[" * 200 + "]" * 200, "nested deeper"),
                           ("".join(" " * i + f"k{i}:\n" for i in range(100)), "nested deeper"),
                           (".inf: 1\n", "non-finite key"),
                           ("\n".join(["a0: &a0 [0, 1]"] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 30)]),
                            "aliases")]:
        with pytest.raises(LoadFileError, match=fragment):
            filecheck.safe_yaml(text, "p.yaml")


# ---------------------------------------------------------------------------------------
# Numbers

def test_denormal_and_huge_loads_are_rescaled_exactly_and_score_in_range():
    base = torch.tensor([[3.0, 1.0, 2.0, 7.0], [1.0, 1.0, 5.0, 2.0]], dtype=torch.float64)
    for scale in (2.0 ** -1070, 2.0 ** -1000, 2.0 ** 1000):
        raw = base * scale
        scaled, k = rescale_extreme(raw, "x")
        assert k != 0 and torch.equal(torch.from_numpy(np.ldexp(scaled.numpy(), -k)), raw)
        m = score(Problem(scaled, 8, 1, 1, 2), solve(Problem(scaled, 8, 1, 1, 2), "deepseek").plan).metrics()
        ref = score(Problem(base, 8, 1, 1, 2), solve(Problem(base, 8, 1, 1, 2), "deepseek").plan).metrics()
        assert m["imbalance_mean"] == pytest.approx(ref["imbalance_mean"], rel=1e-12) and m["imbalance_mean"] >= 1


def test_the_scorer_never_prints_an_imbalance_below_one_on_subnormal_loads():
    w = torch.full((1, 4), 1e-320, dtype=torch.float64)
    m = score(Problem(w, 4, 1, 1, 2), solve(Problem(w, 4, 1, 1, 2), "deepseek").plan).metrics()
    assert m["imbalance_mean"] == 1.0 and m["balancedness"] == 1.0


def test_integer_sums_that_would_wrap_are_refused(tmp_path):
    np.savez(tmp_path / "w.npz", loads=np.full((4, 2, 4), 2**62, np.int64))
    with pytest.raises(LoadFileError, match=r"2\*\*53"):
        read_loads(tmp_path / "w.npz")
    np.savez(tmp_path / "ok.npz", loads=np.full((4, 2, 4), 2**40, np.int64))
    assert float(read_loads(tmp_path / "ok.npz").weights.sum()) == 32 * 2.0**40


# ---------------------------------------------------------------------------------------
# Work caps

def test_the_greedy_plans_what_the_swap_search_is_refused():
    """At 32768 slots on one GPU kk_swap's packing is refused by its work model
    (tests/test_work_model.py) before it starts, while the greedy's model accepts it: the
    work cap is per solver."""
    w = torch.ones(1, 4, dtype=torch.float64)
    big = Problem(w, 32768, 1, 1, 1)
    with pytest.raises(ProblemError, match="work cap"):
        solve(big, "kk_swap")
    assert get_solver("deepseek").check_work(big) < get_solver("kk_swap").estimate(big) / 10


# ---------------------------------------------------------------------------------------
# Writes

def test_writes_refuse_devices_and_directories(tmp_path):
    with pytest.raises(LoadFileError, match="not a regular file"):
        write_text_atomic("/dev/null", "x")
    with pytest.raises(LoadFileError, match="is a directory"):
        write_text_atomic(tmp_path, "x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(LoadFileError, match="not a regular file"):
        write_text_atomic(fifo, "x")


def test_a_failed_write_leaves_the_target_and_no_temporary(tmp_path):
    target = tmp_path / "plan.json"
    target.write_text("old")

    def full_disk(tmp):
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(LoadFileError, match="No space left"):
        write_atomic(target, full_disk)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]

    def crash(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, crash)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_a_valid_long_name_is_written_with_a_short_temporary(tmp_path):
    name = "a" * 250 + ".json"                                     # 255 bytes: the longest valid name
    write_text_atomic(tmp_path / name, "{}")
    assert (tmp_path / name).read_text() == "{}" and len(list(tmp_path.iterdir())) == 1


def test_a_written_file_gets_the_usual_permissions(tmp_path):
    write_text_atomic(tmp_path / "new.txt", "x")
    umask = os.umask(0o022)
    os.umask(umask)
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o666 & ~umask


def test_scratch_of_a_dead_process_is_swept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f"eplb-scratch-{dead}-abc"
    stale.mkdir()
    (stale / "model.mps").write_text("x" * 100)
    mine = tmp_path / f"eplb-scratch-{os.getpid()}-abc"
    mine.mkdir()
    assert childproc.sweep_stale_scratch(str(tmp_path)) == 1
    assert not stale.exists() and mine.exists()


def test_a_torch_save_into_a_pt_is_atomic_too(tmp_path):
    buf = io.BytesIO()
    torch.save({"loads": torch.ones(2, 4)}, buf)
    out = write_atomic(tmp_path / "t.pt", lambda tmp: tmp.write_bytes(buf.getvalue()))
    assert torch.equal(read_loads(out).weights, torch.ones(2, 4))


def test_the_simulator_keeps_imbalance_in_range_on_subnormal_loads():
    t = torch.full((4, 2, 8), 1e-320, dtype=torch.float64)
    t[..., 0] = 3e-320
    ref = t / 1e-320                                      # the same loads at a normal scale
    got = simulate(t, cluster=Cluster(1, 2, 8), num_groups=1, solver="deepseek", every=2).totals()
    want = simulate(ref, cluster=Cluster(1, 2, 8), num_groups=1, solver="deepseek", every=2).totals()
    assert got["mean_imbalance"] == pytest.approx(want["mean_imbalance"], rel=1e-9) and got["mean_imbalance"] >= 1
