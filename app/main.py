"""The EPLB workbench app: ``streamlit run app/main.py``.

Four pages (``st.navigation``): explore a placement GPU by GPU, compare solvers on the
same loads, replay a trace under rebalancing settings (over time), browse benchmark results.
"""
from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path

# Streamlit runs this file as a fresh module installed as sys.modules["__main__"], with a
# file and no spec. A multiprocessing child (app/worker.py: stoppable solves) re-imports the
# parent's __main__ by its spec's name, else by its file: it would run this script again,
# outside Streamlit. The name "__main__" tells it to skip that.
__spec__ = importlib.machinery.ModuleSpec("__main__", None)  # noqa: A001

# `streamlit run app/main.py` puts app/ on sys.path, not the repository root.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402
import torch  # noqa: E402

from app.widgets import restore_kept  # noqa: E402

# The heuristics run many small kernels over [layers, slots] tensors: one intra-op thread
# beats several (17x faster measured on a loaded 2-core machine; thread wake-ups dominate).
# Sessions are served concurrently by the server's own threads anyway.
torch.set_num_threads(int(os.environ.get("EPLB_APP_TORCH_THREADS", "1")))

VIEWS = Path(__file__).resolve().parent / "views"

# A local icon: a material-symbol page icon is fetched from fonts.gstatic.com, which an
# offline or firewalled machine cannot reach.
ICON = Path(__file__).resolve().parent / "assets" / "icon.png"
st.set_page_config(page_title="EPLB workbench", page_icon=str(ICON), layout="wide")
pages = [
    st.Page(VIEWS / "explore.py", title="Explore a placement", icon=":material/search:", default=True),
    st.Page(VIEWS / "compare.py", title="Compare solvers", icon=":material/compare_arrows:"),
    st.Page(VIEWS / "over_time.py", title="Over time", icon=":material/timeline:"),
    st.Page(VIEWS / "results.py", title="Benchmark results", icon=":material/leaderboard:"),
]
page = st.navigation(pages)
restore_kept(page.url_path)          # widgets shared by pages, and a page's own, open as they were left
page.run()
