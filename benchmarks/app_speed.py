"""How fast the app answers in a real browser (Debian's Chromium driven by Playwright).

    python -m benchmarks.app_speed [--repeat 3] [--screens DIR]

Targets of the app:
- first render of Explore (default dataset, ``deepseek``) within 3 s of the server being
  healthy: from the health check answering to the per-GPU chart drawn, in a tab (a new
  browser context: empty cache) that was open before the server started, as a user's
  browser is; the server is started as ``make run`` starts it;
- a chart-setting change with cached results within 0.5 s: the layer slider, from the key
  press to the redrawn chart with the new layer's title; and a switch of view (heatmap,
  per layer, per-GPU load), from the click to the new view's chart;
- Compare with deepseek, kk_swap, joint and best (time limit 1 s) on a DeepSeek-V3
  dataset within 10 s: from the click to the results table and charts.

Each timing is printed with ``os.getloadavg()`` (the machine may be shared).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.app_harness import CHART, browser, chromium_path, serve, wait_idle

TARGETS = {"explore_first_render_s": 3.0, "chart_change_s": 0.5, "view_change_s": 0.5, "compare_4_solvers_s": 10.0}
# Explore's views and a text that only the view's chart has.
VIEW_TEXT = (("Heatmap", "load / mean"), ("Per layer", "GPU imbalance"), ("Per-GPU load", "imbalance "))


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _first_render(page, url: str, healthy_at: float) -> float:
    page.goto(url)
    page.wait_for_selector(CHART, timeout=120_000)
    took = time.monotonic() - healthy_at
    page.close()
    return took


def _explore_session(b, url: str) -> tuple[float, float, list[float]]:
    """(time to the first chart in a new session on a warm server, a layer-slider change,
    the view switches)."""
    page = b.new_page(viewport={"width": 1500, "height": 1400})
    page.goto("about:blank")               # an open tab, as for the first render: its renderer is up
    start = time.monotonic()
    page.goto(url)
    page.wait_for_selector(CHART, timeout=120_000)
    warm = time.monotonic() - start
    wait_idle(page)
    title_js = "() => (document.querySelector('[data-testid=\"stPlotlyChart\"] .gtitle') || {}).textContent || ''"
    before = page.evaluate(title_js)                           # "Layer 48: imbalance 1.6874"
    slider = page.locator('[data-testid="stSlider"]').filter(has_text="Layer").get_by_role("slider")
    slider.focus()
    start = time.monotonic()
    slider.press("ArrowLeft")
    page.wait_for_function(f"(before) => {{ const t = ({title_js})(); return t.startsWith('Layer') && t !== before; }}",
                           arg=before, timeout=30_000)
    change = time.monotonic() - start
    wait_idle(page)
    has_text = "(s) => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')].some(e => e.textContent.includes(s))"
    views = []
    for view, text in VIEW_TEXT:
        start = time.monotonic()
        page.locator('[data-testid="stButtonGroup"] button').filter(has_text=view).first.click()
        page.wait_for_function(has_text, arg=text, timeout=30_000)
        views.append(time.monotonic() - start)
        wait_idle(page)
    page.close()
    return warm, change, views


def _compare(b, url: str, screens: Path | None) -> float:
    page = b.new_page(viewport={"width": 1500, "height": 2200})
    page.goto(f"{url}/compare")
    page.get_by_role("button", name="Run comparison").wait_for(timeout=120_000)
    wait_idle(page)
    chosen = page.locator('[data-testid="stMultiSelect"]').first.inner_text()
    assert all(n in chosen for n in ("deepseek", "kk_swap", "joint", "best")), chosen
    # the page's default solvers (backtest joined them): say what ran beside the time
    print("Compare runs its default solvers: " + ", ".join(n for n in chosen.split() if n.isidentifier())
          + ", each with the hierarchical and the global policy")
    start = time.monotonic()
    page.get_by_role("button", name="Run comparison").click()
    page.wait_for_selector('[data-testid="stDataFrame"]', timeout=300_000)
    page.wait_for_selector(CHART, timeout=300_000)
    took = time.monotonic() - start
    if screens:
        wait_idle(page)
        page.screenshot(path=str(screens / "compare-speed.png"), full_page=True)
    page.close()
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="sessions per warm measurement (median reported)")
    ap.add_argument("--screens", type=Path, default=None, help="save a screenshot of the Compare run here")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON at the end")
    args = ap.parse_args(argv)
    if chromium_path() is None:
        print("app_speed: chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    if args.screens:
        args.screens.mkdir(parents=True, exist_ok=True)
    out: dict[str, float] = {}
    print(f"machine: {os.cpu_count()} CPUs, {_load()} at start")
    with browser() as b:
        tab = b.new_page(viewport={"width": 1500, "height": 1400})   # the browser is up before the server
        tab.goto("about:blank")
        with serve() as (url, healthy_at):
            _measure(b, tab, url, healthy_at, out, args)
    for key, target in TARGETS.items():
        print(f"{key}: {out[key]:.3f} s, target {target:g} s: {'PASS' if out[key] <= target else 'FAIL'}")
    if args.json:
        print(json.dumps({**out, "load_average": os.getloadavg()}))
    return 0


def _measure(b, tab, url: str, healthy_at: float, out: dict[str, float], args) -> None:
    """Fill ``out`` with the three timings (and the warm-session render) on one server;
    ``tab``: a blank page in a fresh context, opened before the server started."""
    out["explore_first_render_s"] = _first_render(tab, url, healthy_at)
    print(f"Explore, first render after healthy (cold server): {out['explore_first_render_s']:.2f} s  ({_load()})")
    warm, change, views = zip(*(_explore_session(b, url) for _ in range(args.repeat)))
    out["explore_warm_render_s"] = statistics.median(warm)
    out["chart_change_s"] = statistics.median(change)
    switches = [x for v in views for x in v]
    out["view_change_s"] = statistics.median(switches)
    print(f"Explore, new session on a warm server: median {out['explore_warm_render_s']:.2f} s of "
          f"{', '.join(f'{x:.2f}' for x in warm)}  ({_load()})")
    print(f"Explore, layer slider change (cached plan): median {out['chart_change_s']:.3f} s of "
          f"{', '.join(f'{x:.3f}' for x in change)}  ({_load()})")
    print(f"Explore, view switch (heatmap, per layer, per-GPU; cached plan): median {out['view_change_s']:.3f} s of "
          f"{', '.join(f'{x:.3f}' for x in switches)}  ({_load()})")
    out["compare_4_solvers_s"] = _compare(b, url, args.screens)
    print(f"Compare, the page's default solvers and both policies (time limit 1 s) on deepseek-v3-skewed: "
          f"{out['compare_4_solvers_s']:.2f} s  ({_load()})")

if __name__ == "__main__":
    sys.exit(main())
