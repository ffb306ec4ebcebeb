"""The wheel carries the code and its shipped data (datasets, benchmark results) and works on its
own: installed outside the checkout, `eplb datasets`, `eplb plan --loads <dataset>` and
`eplb recommend` run from another directory."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import solvers

ROOT = Path(__file__).resolve().parents[1]
# Build outputs, caches and local runs: never part of what a clone builds from.
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                    ".hypothesis", "bench-out", "out")


def _build_wheel(tmp: Path) -> Path:
    """Build from a copy of the tree (a stale build/ in the checkout could leak old files)."""
    src = tmp / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=NOT_SOURCE)
    out = tmp / "dist"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("eplb_workbench-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip("pip is not available in this interpreter")
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_ships_datasets_and_results_and_no_top_level_benchmarks(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    top = {n.split("/", 1)[0] for n in names}
    assert "solvers" in top
    assert "benchmarks" not in top and "datasets" not in top and "tests" not in top

    data = "solvers/workloads/data/"
    catalog = json.loads(zipfile.ZipFile(wheel).read(data + "catalog.json"))
    files = [e["file"] for e in catalog["datasets"]]
    assert any(f.endswith(".npz") for f in files) and "examples/readme.json" in files
    missing = [f for f in files if data + f not in names]
    assert not missing, f"catalog files not in the wheel: {missing}"

    results = "solvers/bench/results/"
    assert {results + "meta.json", results + "summary.md"} <= names
    assert results + "results.parquet" in names or results + "results.csv" in names
    assert "solvers/bench/run.py" in names and "solvers/bench/recommend.py" in names


def test_wheel_version_is_the_package_version(wheel):
    assert wheel.name.startswith(f"eplb_workbench-{solvers.__version__}-")
    meta = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))
    assert f"\nVersion: {solvers.__version__}\n" in zipfile.ZipFile(wheel).read(meta).decode()


@pytest.mark.slow
def test_installed_wheel_runs_the_cli_from_another_directory(wheel, tmp_path):
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    # -S: no site processing, so the checkout's editable install (a .pth finder) is not loaded;
    # dependencies come from this interpreter's site-packages, the package only from the wheel.
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    env = {k: v for k, v in os.environ.items() if k not in ("EPLB_DATASETS", "PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join([str(target), *sorted(deps)])

    def eplb(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-S", "-c", "import sys; from solvers.cli import main; sys.exit(main())",
                               *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)

    where = subprocess.run([sys.executable, "-S", "-c", "import solvers; print(solvers.__file__)"], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(target)

    listing = eplb("datasets")
    assert listing.returncode == 0, listing.stderr
    assert "deepseek-v3-skewed" in listing.stdout

    plan = eplb("plan", "--loads", "deepseek-v3-skewed", "--replicas", "288", "--groups", "8", "--nodes", "4",
                "--gpus", "32", "--out", str(cwd / "p.json"))
    assert plan.returncode == 0, plan.stderr
    assert json.loads((cwd / "p.json").read_text())["problem"]["num_replicas"] == 288

    rec = eplb("recommend", "--experts", "256", "--replicas", "288", "--gpus", "32", "--nodes", "4", "--groups", "8")
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.startswith("use ")


def test_checkout_reads_the_top_level_datasets_folder_through_the_package(monkeypatch):
    from solvers.workloads.catalog import datasets_dir

    monkeypatch.delenv("EPLB_DATASETS", raising=False)
    if not (ROOT / "datasets").is_dir() or not Path(solvers.__file__).resolve().is_relative_to(ROOT):
        pytest.skip("not running from a checkout")
    # solvers/workloads/data is a link: the repository keeps one copy, in datasets/.
    assert (ROOT / "solvers" / "workloads" / "data").is_symlink()
    assert datasets_dir().resolve() == (ROOT / "datasets").resolve()
