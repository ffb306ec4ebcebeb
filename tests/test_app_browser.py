"""The app in a real browser: Playwright drives Debian's Chromium against `streamlit run
app/main.py` (headless, free port). Each page: open it, change a setting, run, wait for a
plotly chart, check no exception box, save a screenshot. Every test fails on a console
error; at 1280x800 and 1920x1080 no metric value, label or sidebar choice may be cut
(scroll width against client width), and widgets keep their values across a solver switch
and a page round trip.

Skipped only where chromium is missing, and never under CI=true (a CI without chromium
fails here instead). Screenshots go to pytest's tmp_path and, when it exists or can be
made, and to $APP_SCREENS_DIR when it is set, for a person to look at.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlparse

import pytest

from benchmarks.app_harness import CHART, EXCEPTION, browser, chromium_path, serve, wait_idle

CHROMIUM = chromium_path()
if CHROMIUM is None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise RuntimeError("CI=true but chromium is missing: the set-up (scripts/setup.sh) installs Debian's chromium")
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

SCREENS = Path(os.environ["APP_SCREENS_DIR"]) if os.environ.get("APP_SCREENS_DIR") else None
VIEWPORT = {"width": 1500, "height": 2200}
SIZES = {"1280x800": {"width": 1280, "height": 800}, "1920x1080": {"width": 1920, "height": 1080}}
LOCAL_HOSTS = ("127.0.0.1", "localhost")
# Opened at /compare, Streamlit's frontend first asks /compare/_stcore/health and
# /compare/_stcore/host-config (is "compare" the server's base path?), gets 404, then asks
# /_stcore/...: Chromium logs the two 404s. Only these two probes are allowed (docs/app.md).
BASE_PATH_PROBE = re.compile(r"^http://[^/]+/[a-z_]+/_stcore/(health|host-config)$")
SERVER_LOG: list[Path] = []


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    SERVER_LOG[:] = [log]
    with serve(log=log) as (url, _):
        yield url


@pytest.fixture(scope="module")
def chromium():
    with browser(CHROMIUM) as b:
        yield b


def _open(chromium, viewport):
    """A page in a fresh context, and what it logs: requests to other hosts, plotly.js
    warnings, console errors and uncaught page errors."""
    ctx = chromium.new_context(viewport=viewport)
    p = ctx.new_page()
    p.set_default_timeout(120_000)
    seen = {"outside": [], "warnings": [], "errors": []}
    p.on("request", lambda r: None if urlparse(r.url).hostname in LOCAL_HOSTS or r.url.startswith(("data:", "blob:"))
         else seen["outside"].append(r.url))

    def console(m) -> None:
        if m.text.startswith("WARN:"):
            seen["warnings"].append(m.text[:200])
        elif m.type == "error" and not BASE_PATH_PROBE.match(m.location.get("url", "")):
            seen["errors"].append(f"{m.text[:200]} ({m.location.get('url', '')})")

    p.on("console", console)
    p.on("pageerror", lambda e: seen["errors"].append(f"page error: {str(e)[:200]}"))
    return ctx, p, seen


def _check(seen) -> None:
    assert not seen["outside"], f"requests to other hosts: {seen['outside'][:5]}"
    assert not seen["warnings"], f"plotly.js warnings: {sorted(set(seen['warnings']))[:5]}"
    assert not seen["errors"], f"console errors: {seen['errors'][:5]}"


@pytest.fixture
def page(chromium):
    """A page in a fresh context; afterwards, no request may have left this machine (the app
    must work offline), plotly.js must not have warned (it logs a stack trace per warning)
    and the console must show no error."""
    ctx, p, seen = _open(chromium, VIEWPORT)
    yield p
    ctx.close()
    _check(seen)


@pytest.fixture(params=["1280x800", pytest.param("1920x1080", marks=pytest.mark.slow)])
def sized(chromium, request):
    """A page at 1280x800 or 1920x1080 (the same checks as ``page``; the second size is
    in the slow run)."""
    ctx, p, seen = _open(chromium, SIZES[request.param])
    yield request.param, p
    ctx.close()
    _check(seen)


def _shot(page, tmp_path: Path, name: str, full_page: bool = True) -> Path:
    path = tmp_path / f"{name}.png"
    size = page.viewport_size
    page.mouse.move(size["width"] - 5, size["height"] - 5)      # no tooltip in the picture
    wait_idle(page)
    page.screenshot(path=str(path), full_page=full_page)
    if SCREENS is not None:
        SCREENS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SCREENS / path.name)
    return path


def _select(page, label: str, option: str) -> None:
    """Pick ``option`` in the Streamlit selectbox labelled ``label``: typed into its combobox
    (a click does not open a selectbox of three options), then the one option left."""
    box = page.locator('[data-testid="stSelectbox"]').filter(has_text=label).first.locator("input").first
    box.click()
    box.fill(option)
    page.get_by_role("option", name=option, exact=True).click()
    wait_idle(page)


def _no_exception(page) -> None:
    assert page.locator(EXCEPTION).count() == 0, page.locator(EXCEPTION).first.inner_text()


def test_explore_page_in_the_browser(app_url, page, tmp_path):
    page.goto(app_url)
    page.wait_for_selector(CHART)
    wait_idle(page)
    _select(page, "Solver", "kk_swap (heuristic)")
    page.get_by_role("button", name="Run solver").click()
    wait_idle(page)
    page.wait_for_selector(CHART)
    _no_exception(page)
    assert "policy hierarchical" in page.locator('[data-testid="stMarkdown"]').filter(has_text="termination").first.inner_text()
    assert page.get_by_role("button", name="Deploy").count() == 0        # .streamlit/config.toml: minimal toolbar
    assert "Layer" in page.locator('[data-testid="stPlotlyChart"]').first.inner_text()
    assert _shot(page, tmp_path, "explore").stat().st_size > 10_000
    for view in ("Heatmap", "Micro-batches"):
        page.locator('[data-testid="stButtonGroup"] button').filter(has_text=view).first.click()
        wait_idle(page)
        page.wait_for_selector(CHART)
        _no_exception(page)
        _shot(page, tmp_path, f"explore-{view.lower()}")
    # an impossible cluster: the library's message, and nothing stale left from the last plan
    nodes = page.get_by_label("Nodes", exact=True)
    nodes.fill("3")
    nodes.press("Enter")
    wait_idle(page)
    page.wait_for_selector('[data-testid="stAlertContentError"]')
    assert "num_gpus" in page.locator('[data-testid="stAlertContentError"]').first.inner_text()
    _no_exception(page)
    assert page.locator(CHART).count() == 0
    _shot(page, tmp_path, "explore-error")


def test_compare_page_in_the_browser(app_url, page, tmp_path):
    page.goto(f"{app_url}/compare")
    page.get_by_role("button", name="Run comparison").wait_for()
    wait_idle(page)
    # fewer solvers than the default (a setting change): Backspace drops the last chosen ones
    box = page.locator('[data-testid="stMultiSelect"] input').first
    box.click()
    for _ in range(4):                    # the default six: deepseek, kk_swap, joint, best, risk_aware, backtest
        box.press("Backspace")
    page.keyboard.press("Escape")
    wait_idle(page)
    chosen = page.locator('[data-testid="stMultiSelect"]').first.inner_text()
    assert "deepseek" in chosen and "kk_swap" in chosen and not any(n in chosen for n in ("joint", "best", "risk_aware", "backtest"))
    page.get_by_role("button", name="Run comparison").click()
    page.wait_for_selector(CHART)
    wait_idle(page)
    _no_exception(page)
    assert page.locator('[data-testid="stDataFrame"]').count() == 1
    assert page.locator(CHART).count() >= 4
    _shot(page, tmp_path, "compare")


def test_over_time_page_in_the_browser(app_url, page, tmp_path):
    page.goto(f"{app_url}/over_time")
    page.get_by_role("button", name="Run replay").wait_for()
    wait_idle(page)
    _select(page, "Cluster preset", "Decode EP64 (8 x 8 GPUs)")   # a setting change
    page.get_by_role("button", name="Run replay").click()
    page.wait_for_selector(CHART)
    wait_idle(page)
    _no_exception(page)
    assert page.locator(CHART).count() == 4           # imbalance, bytes, frontier, net line
    _shot(page, tmp_path, "over-time")


def test_results_page_in_the_browser(app_url, page, tmp_path):
    page.goto(f"{app_url}/results")
    page.wait_for_selector('[data-testid="stDataFrame"]')
    wait_idle(page)
    page.get_by_role("tab", name="Recommend").click()
    page.get_by_label("Time budget (s)").fill("10")
    page.get_by_role("button", name="Recommend").click()
    wait_idle(page)
    page.wait_for_selector('[data-testid="stAlertContentSuccess"]')
    _shot(page, tmp_path, "results-recommend")
    page.get_by_role("tab", name="Profiles").click()
    page.wait_for_selector(CHART)
    _no_exception(page)
    _shot(page, tmp_path, "results")


# ---------------------------------------------------------------------------------------
# Cut values, kept widgets, every page at two sizes

_CUT_JS = """(selector) => {
    const cut = [];
    for (const root of document.querySelectorAll(selector)) {
        for (const el of [root, ...root.querySelectorAll('*')]) {
            const text = (el.innerText || '').trim();
            if (text && el.children.length === 0 && el.scrollWidth > el.clientWidth + 1)
                cut.push(text.slice(0, 40) + ' (' + el.scrollWidth + ' > ' + el.clientWidth + ')');
        }
    }
    return cut;
}"""


def _cut(page, selector: str) -> list[str]:
    """Texts inside ``selector`` that do not fit their box (scroll width > client width)."""
    return page.evaluate(_CUT_JS, selector)


def test_metric_values_and_labels_are_not_cut(app_url, sized, tmp_path):
    name, page = sized
    page.goto(app_url)
    page.wait_for_selector(CHART)
    page.wait_for_selector('[data-testid="stMetricValue"]')
    wait_idle(page)
    _no_exception(page)
    assert page.locator('[data-testid="stMetric"]').count() >= 9
    assert _cut(page, '[data-testid="stMetric"]') == []
    assert _cut(page, '[data-testid="stSidebar"] [data-testid="stSelectbox"]') == []     # the cluster preset
    _shot(page, tmp_path, f"explore-{name}", full_page=False)
    page.locator('[data-testid="stButtonGroup"] button').filter(has_text="Download").first.click()
    wait_idle(page)
    page.wait_for_selector('[data-testid="stDownloadButton"]')
    assert _cut(page, '[data-testid="stDownloadButton"]') == []
    _shot(page, tmp_path, f"explore-download-{name}", full_page=False)


def _selected(page, label: str) -> str:
    """What the selectbox labelled ``label`` shows."""
    return page.locator('[data-testid="stSelectbox"]').filter(has_text=label).first.locator("input").first.input_value()


def _nav(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"] a').filter(has_text=title).first.click()
    wait_idle(page)


@pytest.mark.slow
def test_widgets_keep_their_values_across_a_solver_switch_and_a_page_round_trip(app_url, sized, tmp_path):
    name, page = sized
    page.goto(app_url)
    page.wait_for_selector(CHART)
    wait_idle(page)
    _select(page, "Dataset", "deepseek-v3-mild")
    _select(page, "policy", "global")
    _select(page, "Solver", "kk_swap (heuristic)")
    page.wait_for_selector(CHART)
    assert "global" in _selected(page, "policy")                            # kept across the solver switch
    assert "policy global" in page.locator('[data-testid="stMarkdown"]').filter(has_text="termination").first.inner_text()
    _nav(page, "Compare solvers")
    page.get_by_role("button", name="Run comparison").wait_for()
    assert "deepseek-v3-mild" in _selected(page, "Dataset")                  # the pages share the loads
    _nav(page, "Explore a placement")
    page.wait_for_selector(CHART)
    wait_idle(page)
    _no_exception(page)
    assert "deepseek-v3-mild" in _selected(page, "Dataset")
    assert "kk_swap" in _selected(page, "Solver")
    assert "global" in _selected(page, "policy")
    _shot(page, tmp_path, f"explore-round-trip-{name}", full_page=False)


@pytest.mark.slow
def test_every_page_at_both_sizes(app_url, sized, tmp_path):
    """A screenshot of every page, after its run, as a person sees it first (no scrolling)."""
    name, page = sized
    page.goto(f"{app_url}/compare")
    page.get_by_role("button", name="Run comparison").click()
    page.wait_for_selector(CHART)
    wait_idle(page)
    _no_exception(page)
    _shot(page, tmp_path, f"compare-{name}", full_page=False)
    page.goto(f"{app_url}/over_time")
    page.get_by_role("button", name="Run replay").click()
    page.wait_for_selector(CHART)
    wait_idle(page)
    _no_exception(page)
    _shot(page, tmp_path, f"over-time-{name}", full_page=False)
    page.goto(f"{app_url}/results")
    page.wait_for_selector('[data-testid="stDataFrame"]')
    wait_idle(page)
    _no_exception(page)
    _shot(page, tmp_path, f"results-{name}", full_page=False)


def test_server_log_has_no_warnings_of_the_warm_up(app_url):
    """`make run` used to print ten "No runtime found" lines and "missing ScriptRunContext"
    (the warm-up's cached calls; and a stoppable solve's child that ran app/main.py again).
    Runs after the other tests of this module, on the log of the server they used."""
    text = SERVER_LOG[0].read_text() if SERVER_LOG else ""
    assert SERVER_LOG and ("Uvicorn server started" in text or "You can now view" in text)
    assert "No runtime found" not in text and "missing ScriptRunContext" not in text, text[:3000]
    assert "No runtime found" not in text and "missing ScriptRunContext" not in text


@pytest.mark.slow
def test_stop_ends_a_running_exact_solver(app_url, page, tmp_path):
    """cpsat on DeepSeek-V3 4 x 8 (10 s limit): Stop while it runs gives the "Stopped"
    warning and no plan; a solver left running would instead draw its plan."""
    page.goto(app_url)
    page.wait_for_selector(CHART)
    wait_idle(page)
    _select(page, "Solver", "cpsat (exact)")
    page.get_by_role("button", name="Run solver").click()
    page.get_by_text("Stop ends it now").wait_for()                         # the child is running
    page.get_by_test_id("stSidebarUserContent").get_by_role("button", name="Stop").click()
    page.get_by_text("Stopped cpsat").wait_for()
    wait_idle(page)
    _no_exception(page)
    assert page.locator(CHART).count() == 0
    _shot(page, tmp_path, "explore-stopped")
