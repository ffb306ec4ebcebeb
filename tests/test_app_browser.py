"""The app in a real browser: Playwright drives Debian's Chromium against `streamlit run
app/main.py` (headless, free port). Each page: open it, change a setting, run, wait for a
plotly chart, check no exception box, save a screenshot.

Skipped only where chromium is missing, and never under CI=true (a CI without chromium
fails here instead). Screenshots go to pytest's tmp_path and, when it exists or can be
made, and to $APP_SCREENS_DIR when it is set, for a person to look at.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlparse

import pytest

from app.harness import CHART, EXCEPTION, browser, chromium_path, serve, wait_idle

CHROMIUM = chromium_path()
if CHROMIUM is None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise RuntimeError("CI=true but chromium is missing: the set-up (scripts/setup.sh) installs Debian's chromium")
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

SCREENS = Path(os.environ["APP_SCREENS_DIR"]) if os.environ.get("APP_SCREENS_DIR") else None
VIEWPORT = {"width": 1500, "height": 2200}
LOCAL_HOSTS = ("127.0.0.1", "localhost")


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with serve(log=log) as (url, _):
        yield url


@pytest.fixture(scope="module")
def chromium():
    with browser(CHROMIUM) as b:
        yield b


@pytest.fixture
def page(chromium):
    """A page in a fresh context; afterwards, no request may have left this machine (the app
    must work offline) and plotly.js must not have warned (it logs a stack trace per warning)."""
    ctx = chromium.new_context(viewport=VIEWPORT)
    p = ctx.new_page()
    p.set_default_timeout(120_000)
    outside, warnings = [], []
    p.on("request", lambda r: None if urlparse(r.url).hostname in LOCAL_HOSTS or r.url.startswith(("data:", "blob:"))
         else outside.append(r.url))
    p.on("console", lambda m: warnings.append(m.text[:200]) if m.text.startswith("WARN:") else None)
    yield p
    ctx.close()
    assert not outside, f"requests to other hosts: {outside[:5]}"
    assert not warnings, f"plotly.js warnings: {sorted(set(warnings))[:5]}"


def _shot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.mouse.move(VIEWPORT["width"] - 5, VIEWPORT["height"] - 5)      # no tooltip in the picture
    wait_idle(page)
    page.screenshot(path=str(path), full_page=True)
    if SCREENS is not None:
        SCREENS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SCREENS / path.name)
    return path


def _select(page, label: str, option: str) -> None:
    """Pick ``option`` in the Streamlit selectbox labelled ``label``."""
    page.locator('[data-testid="stSelectbox"]').filter(has_text=label).first.click()
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
    assert page.locator('[data-testid="stMetric"]').filter(has_text="Termination").count() == 1
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
    box.press("Backspace")
    box.press("Backspace")
    page.keyboard.press("Escape")
    wait_idle(page)
    chosen = page.locator('[data-testid="stMultiSelect"]').first.inner_text()
    assert "deepseek" in chosen and "kk_swap" in chosen and "joint" not in chosen and "best" not in chosen
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
    _select(page, "Cluster preset", "Decode EP64: 8 nodes x 8 GPUs")   # a setting change
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
