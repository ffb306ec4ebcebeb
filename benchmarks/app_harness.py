"""Serve the app headless and drive it with Debian's Chromium (the browser tests and the app benchmarks;
not part of the app).

No browser is downloaded: Playwright drives ``/usr/bin/chromium`` (or ``$BROWSER_PATH``)
through ``executable_path``.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
MAIN = ROOT / "app" / "main.py"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
CHART = '[data-testid="stPlotlyChart"] .js-plotly-plot'
EXCEPTION = '[data-testid="stException"]'


def chromium_path() -> str | None:
    """Debian's chromium (``$BROWSER_PATH`` wins), or None when it is not installed."""
    for candidate in (os.environ.get("BROWSER_PATH"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, timeout: float = 120.0, proc: subprocess.Popen | None = None) -> float:
    """Poll ``url/_stcore/health`` until it answers ok; returns the time it became healthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200 and r.read().strip() == b"ok":
                    return time.monotonic()
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not healthy after {timeout:.0f} s")


@contextlib.contextmanager
def running_app(port: int, stdout: Any = subprocess.DEVNULL) -> Iterator[tuple[str, subprocess.Popen]]:
    """``python -m app.serve`` (as ``make run``) headless on ``port``, stopped on exit; yields
    (url, process) at once, before the server is healthy (:func:`wait_healthy`)."""
    cmd = [sys.executable, "-m", "app.serve", "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=stdout, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def serve(port: int | None = None, log: Path | None = None) -> Iterator[tuple[str, float]]:
    """Run the app as ``make run`` does (``python -m app.serve``: ``streamlit run app/main.py``
    with the heavy modules imported first) headless on a free port; yields (url, healthy_at)."""
    out = open(log, "w") if log else subprocess.DEVNULL
    try:
        with running_app(port or free_port(), out) as (url, proc):
            yield url, wait_healthy(url, proc=proc)
    finally:
        if log:
            out.close()


@contextlib.contextmanager
def browser(executable: str | None = None):
    """A headless Chromium driven by Playwright (sync API)."""
    from playwright.sync_api import sync_playwright

    path = executable or chromium_path()
    if path is None:
        raise RuntimeError("no chromium: install Debian's chromium (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


_BUSY_JS = """() => !!(document.querySelector('[data-testid="stStatusWidgetRunningIcon"]')
    || document.querySelector('[data-testid="stStatusWidgetRunningManIcon"]')
    || document.querySelector('[data-testid="stElementContainer"][data-stale="true"]')
    || document.querySelector('[data-testid="stAppSkeleton"]'))"""


def wait_idle(page, timeout_s: float = 120.0, settle_s: float = 0.6) -> None:
    """Wait until the script run has ended: no running indicator and no stale element (the
    old run's elements stay, marked stale, until the new run replaces or drops them) for
    ``settle_s`` in a row."""
    deadline = time.monotonic() + timeout_s
    quiet_since = None
    page.wait_for_timeout(200)
    while time.monotonic() < deadline:
        if page.evaluate(_BUSY_JS):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= settle_s:
            return
        page.wait_for_timeout(100)
    raise TimeoutError(f"the app was still running after {timeout_s:.0f} s")
