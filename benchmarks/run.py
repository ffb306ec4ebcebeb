"""``python -m benchmarks.run ...`` from a checkout: the harness's runner, ``solvers.bench.run``
(installed as ``eplb bench run ...``).

With ``--suite full`` it then runs the generalisation benchmark (:mod:`benchmarks.generalisation`,
a script of this checkout the installed package does not have) into ``OUT/generalisation.jsonl``;
that file resumes like the suite does. Its exit status is the suite's, or the benchmark's
verdict when the suite passed."""
import sys

from solvers.bench.run import main


def _option(argv: list[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def run(argv: list[str]) -> int:
    rc = main(argv)
    out = _option(argv, "--out")
    if rc == 0 and _option(argv, "--suite") == "full" and out is not None:
        from pathlib import Path

        from benchmarks import generalisation
        rc = generalisation.main(["--out", str(Path(out) / "generalisation.jsonl")])
    return rc


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
