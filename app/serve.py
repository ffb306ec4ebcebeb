"""Start the app with its heavy modules already imported: ``python -m app.serve [FLAGS]``.

``streamlit run app/main.py`` imports torch, the solvers and plotly when the first browser
session runs the script, so the first page waits for them (several seconds). This
launcher imports them in the server process before the server starts answering, then
hands over to Streamlit's own ``streamlit run app/main.py FLAGS`` in the same process.
Before that it also solves the default Explore page into the cache and builds one figure
of each kind (plotly loads its validators lazily), so the first browser session does not
wait for them either.
"""
from __future__ import annotations

import contextlib
import gc
import sys
from pathlib import Path

# What every page needs, imported here, in the server process, before the first session
# (kept in sys.modules for every session).
import pandas  # noqa: F401
import plotly.graph_objects  # noqa: F401
import torch  # noqa: F401

import solvers.bench.analysis  # noqa: F401
import solvers.builtin  # noqa: F401  registers every solver
import solvers.compare  # noqa: F401
import solvers.io  # noqa: F401
from app.quiet import outside_runtime
from solvers.registry import solver_names

with outside_runtime():     # app.cache defines cached functions: before the runtime, they warn
    from app import cache, compute, exports, figures, loads, worker  # noqa: F401
    from app.compute import worst_layer

ROOT = Path(__file__).resolve().parents[1]
MAIN = ROOT / "app" / "main.py"


def preload() -> None:
    """Probe the optional backends and freeze what the imports above made."""
    solver_names(available_only=True)      # probes (imports) the optional exact backends once
    # Everything imported so far lives as long as the server: move it out of the collector's
    # generations so that later collections, during page runs, do not walk it again.
    gc.collect()
    gc.freeze()


def warm() -> None:
    """Solve the default Explore page into the cache and build its per-GPU figure (cached
    too) and a heatmap (plotly loads its validators lazily), before the server answers.

    Streamlit keeps each cached function's store in a module-level registry, created on
    first use: filled here, before the runtime exists, it is the store every session reads.
    A warm-up only saves time: if it fails, the page computes the same thing itself and
    shows any error there."""
    # cached functions called outside a session warn (app.quiet)
    with outside_runtime(), contextlib.suppress(Exception):      # see the docstring
        problem, solver, options = cache.default_explore_inputs()
        result = cache.solve(problem, solver, options).result         # the page's first solve, cached
        cache.gpu_figure(problem, result, worst_layer(result)).to_json()   # as the page opens
        figures.load_heatmap(result.score.gpu_load, problem.num_nodes).to_json()


def main(argv: list[str] | None = None) -> None:
    preload()
    warm()

    worker.start_server()       # the fork server of stoppable solves imports torch now, not at the first one
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", str(MAIN), *(sys.argv[1:] if argv is None else argv)]
    cli.main()


if __name__ == "__main__":
    main()
