"""How long a command takes from the shell prompt: ``eplb score`` on the README example.

Runs each command ``--repeat`` times as a fresh process (what a user pays every time) and
prints the median and the best wall time, plus the modules each one imported: ``--help``
(no torch), a misspelt ``--loads`` (refused before torch loads) and ``eplb score`` on the
README's 2-layer example (torch, the scorer; not the solvers, pandas or scipy's LP).
Target: ``eplb score`` under 2 s on a quiet 2-core machine.

    python -m benchmarks.cli_startup [--repeat 5] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "datasets" / "examples" / "readme.json"
TARGET_SCORE_S = 2.0
HEAVY = ("torch", "pandas", "scipy.optimize", "sympy", "ortools", "pulp", "solvers.bench.run", "solvers.builtin")

# Prints which heavy modules the command loaded, after it ran (stderr, one line).
_PROBE = ("import sys, runpy\n"
          "sys.argv = ['eplb'] + sys.argv[1:]\n"
          "try:\n    runpy.run_module('solvers.cli', run_name='__main__')\n"
          "finally:\n"
          f"    print('LOADED', ','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n")


def timed(argv: list[str], repeat: int, cwd: Path) -> dict:
    times, loaded = [], ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=cwd, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        loaded = next((ln.split(" ", 1)[1] if " " in ln else "" for ln in proc.stderr.splitlines()
                       if ln.startswith("LOADED")), "?")
    return {"argv": argv, "median_s": statistics.median(times), "best_s": min(times), "rc": proc.returncode,
            "loaded": loaded}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cluster = ["--replicas", "16", "--groups", "4", "--nodes", "2", "--gpus", "8"]
        subprocess.run([sys.executable, "-m", "solvers.cli", "plan", "--loads", str(README), *cluster,
                        "--out", "plan.json"], cwd=work, check=True, capture_output=True)
        runs = {
            "--help": ["--help"],
            "missing --loads": ["score", "--loads", "nope.json", "--plan", "plan.json"],
            "score (README example)": ["score", "--loads", str(README), "--plan", "plan.json"],
        }
        results = {name: timed(cmd, a.repeat, work) for name, cmd in runs.items()}
    print(f"{'command':<24} {'median s':>9} {'best s':>7}  heavy modules loaded")
    for name, r in results.items():
        print(f"{name:<24} {r['median_s']:>9.2f} {r['best_s']:>7.2f}  {r['loaded'] or '-'}")
    score_s = results["score (README example)"]["median_s"]
    verdict = "meets" if score_s <= TARGET_SCORE_S else "misses"
    print(f"eplb score: median {score_s:.2f} s, {verdict} the {TARGET_SCORE_S:.0f} s target "
          "(a quiet machine; torch's own import is most of it)")
    if a.json:
        a.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
