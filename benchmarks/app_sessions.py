"""The app as a shared server: concurrent sessions in real browsers, and the server's memory.

    python -m benchmarks.app_sessions [--concurrent 1,4,8] [--sessions 20]

Serves the app as ``make run`` does and opens Explore (default dataset, ``deepseek``) in
fresh browser contexts of Debian's Chromium (Playwright):

- for each count N of ``--concurrent``: N sessions opened at once; each session's time from
  its navigation to its first per-GPU chart, read in the page (``performance.now()`` when
  the chart appears; an init script polls every 50 ms), whether any showed an exception,
  and the CPU seconds the server and the browser spent meanwhile (where the time goes);
- then ``--sessions`` sessions one after another (each to its first chart, then closed):
  the server's resident memory (VmRSS of the streamlit process) before, after every 5th,
  and at the end, with its peak (VmHWM).

Each figure is printed with ``os.getloadavg()``: the machine may be shared.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks.app_harness import CHART, EXCEPTION, browser, free_port, running_app, wait_healthy

_WATCH = """(() => { const t0 = performance.now(); const id = setInterval(() => {
  if (document.querySelector('%s')) { window.__chartAt = performance.now(); clearInterval(id); } }, 50); })();""" % CHART


def _load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB."""
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v, _ = line.split()
                fields[k[:-1]] = int(v) / 1024
    return fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0)


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _browser_cpu_s() -> float:
    """CPU seconds of every Chromium process running now (the browser's share of the machine)."""
    total = 0.0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                if b"chrom" not in fh.read().split(b"\0", 1)[0]:
                    continue
            total += _cpu_s(int(d))
        except (OSError, IndexError, ValueError):
            continue
    return total


def _open(b, url: str):
    ctx = b.new_context(viewport={"width": 1500, "height": 1400})
    ctx.add_init_script(_WATCH)
    page = ctx.new_page()
    page.goto(url, wait_until="commit")
    return ctx, page


def _first_chart_s(page, timeout_s: float) -> float:
    page.wait_for_function("() => window.__chartAt !== undefined", timeout=timeout_s * 1000, polling=100)
    return page.evaluate("window.__chartAt") / 1000.0


def _concurrent(b, url: str, n: int, timeout_s: float, server_pid: int) -> dict:
    server0, browser0, wall0 = _cpu_s(server_pid), _browser_cpu_s(), time.monotonic()
    sessions = [_open(b, url) for _ in range(n)]
    times, errors = [], 0
    for ctx, page in sessions:
        times.append(_first_chart_s(page, timeout_s))
        errors += page.locator(EXCEPTION).count()
    # where the time went: CPU seconds of the server and of the browser while the sessions loaded
    server_cpu, browser_cpu, wall = (_cpu_s(server_pid) - server0, _browser_cpu_s() - browser0,
                                     time.monotonic() - wall0)
    for ctx, _ in sessions:
        ctx.close()
    return {"sessions": n, "first_chart_s": [round(t, 2) for t in times], "median_s": round(statistics.median(times), 2),
            "max_s": round(max(times), 2), "exceptions": errors, "wall_s": round(wall, 1),
            "server_cpu_s": round(server_cpu, 1), "browser_cpu_s": round(browser_cpu, 1), "load": _load()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrent", default="1,4,8", help="session counts opened at once (default 1,4,8)")
    ap.add_argument("--sessions", type=int, default=20, help="sessions opened one after another for memory")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a session may take to its first chart")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    out: dict = {"concurrent": [], "memory_mb": []}
    with running_app(free_port()) as (url, proc):
        wait_healthy(url, proc=proc)
        out["memory_mb"].append({"after_sessions": 0, "rss": round(_rss_mb(proc.pid)[0])})
        with browser() as b:
            for n in (int(x) for x in args.concurrent.split(",")):
                row = _concurrent(b, url, n, args.timeout, proc.pid)
                out["concurrent"].append(row)
                print(f"{n} concurrent: first chart median {row['median_s']} s, max {row['max_s']} s "
                      f"({row['first_chart_s']}), exceptions {row['exceptions']}; CPU over {row['wall_s']} s: "
                      f"server {row['server_cpu_s']} s, browser {row['browser_cpu_s']} s; {row['load']}", flush=True)
            for i in range(1, args.sessions + 1):
                ctx, page = _open(b, url)
                _first_chart_s(page, args.timeout)
                ctx.close()
                if i % 5 == 0 or i == args.sessions:
                    rss, hwm = _rss_mb(proc.pid)
                    out["memory_mb"].append({"after_sessions": i, "rss": round(rss), "peak": round(hwm)})
                    print(f"after {i} sequential sessions: server RSS {rss:.0f} MB (peak {hwm:.0f} MB); {_load()}",
                          flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
