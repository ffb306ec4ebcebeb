"""Start the app with its heavy modules already imported: ``python -m app.serve [FLAGS]``.

``streamlit run app/main.py`` imports torch, the solvers and plotly when the first browser
session runs the script, so the first page waits for them (several seconds). This
launcher imports them in the server process before the server starts answering, then
hands over to Streamlit's own ``streamlit run app/main.py FLAGS`` in the same process.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN = ROOT / "app" / "main.py"


def preload() -> None:
    """Import what every page needs (kept in sys.modules for every session)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import pandas  # noqa: F401
    import plotly.graph_objects  # noqa: F401
    import torch  # noqa: F401

    import solvers  # noqa: F401  registers every solver
    import solvers.bench.analysis  # noqa: F401
    import solvers.compare  # noqa: F401
    import solvers.io  # noqa: F401
    # not app.cache or app.widgets: st.cache_data wants the runtime, which starts later
    from app import compute, exports, figures, loads  # noqa: F401


def main(argv: list[str] | None = None) -> None:
    preload()
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", str(MAIN), *(sys.argv[1:] if argv is None else argv)]
    cli.main()


if __name__ == "__main__":
    main()
