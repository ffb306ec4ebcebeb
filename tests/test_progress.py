"""Progress of long calls (solvers.progress): a one-line progress on a terminal, lines with
--progress elsewhere, nothing for short calls; wired into `eplb plan`, simulate and sweep.
Time comes from a fake clock (solvers.clock): no test waits or depends on the machine."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from solvers.cli import main
from solvers.clock import FakeClock, fake_clock
from solvers.dynamics import simulate
from solvers.dynamics.sweep import sweep
from solvers.progress import Ticker, as_mode, progress_line, progress_mode


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_mode_follows_the_stream_and_the_flag():
    assert progress_mode(False, io.StringIO()) == "sparse"
    assert progress_mode(True, io.StringIO()) == "lines"
    assert progress_mode(False, _Tty()) == "tty"
    assert as_mode(False) is None and as_mode("lines") == "lines"
    with pytest.raises(ValueError, match="progress"):
        as_mode("loud")


def test_the_line_says_time_against_the_estimate_or_a_count():
    assert progress_line("kk_swap", 10, 40) == "kk_swap: 10 s of about 40 s [#####...............]"
    assert progress_line("kk_swap", 50, 40).endswith("[####################] (longer than estimated)")
    assert progress_line("simulate", 3, None, 100, 400) == "simulate: 100/400 steps [#####...............] 3 s"
    assert progress_line("x", 2, None) == "x: 2 s"


def test_a_terminal_gets_one_line_rewritten_then_cleared():
    out, clk = _Tty(), FakeClock()
    t = Ticker("best", 4.0, "tty", stream=out, clock=clk)
    t.tick()
    assert out.getvalue() == ""                   # under a second: nothing
    clk.advance(2.0)
    t.tick()
    clk.advance(1.0)
    t.tick()
    t.close()
    text = out.getvalue()
    assert text.count("\r") == 4 and "\n" not in text
    assert "best: 3 s of about 4 s" in text and text.endswith(" " * len("best: 3 s of about 4 s [" + "#" * 15
                                                                         + "." * 5 + "]") + "\r")


def test_a_pipe_gets_a_line_every_five_seconds_and_a_last_one():
    out, clk = io.StringIO(), FakeClock()
    with fake_clock(clk):
        t = Ticker("simulate", None, "lines", stream=out, total=10).__enter__()
        clk.advance(2.0)
        t.update(3)
        t.tick()
        clk.advance(1.0)
        t.tick()                                  # within 5 s of the last line: nothing
        clk.advance(5.0)
        t.update(7)
        t.close()
    assert out.getvalue().splitlines() == ["simulate: 3/10 steps [######..............] 2 s",
                                           "simulate: 10/10 steps [####################] 8 s"]


def test_a_pipe_without_the_flag_hears_of_long_calls_only():
    """A replay of many minutes piped to a log is not silent: a line a minute once it has run
    30 s, and a last one; a call shorter than 30 s writes nothing."""
    out, clk = io.StringIO(), FakeClock()
    with fake_clock(clk):
        t = Ticker("simulate", None, "sparse", stream=out, total=100).__enter__()
        clk.advance(29.0)
        t.tick()
        assert out.getvalue() == ""
        for _ in range(12):                       # two more minutes, reported every 10 s
            clk.advance(10.0)
            t.update(5)
            t.tick()
        t.close()
    assert out.getvalue().splitlines() == ["simulate: 5/100 steps [#...................] 39 s",
                                           "simulate: 35/100 steps [#######.............] 99 s",
                                           "simulate: 60/100 steps [############........] 149 s"]
    short, clk = io.StringIO(), FakeClock()
    with fake_clock(clk):
        t = Ticker("plan", 1.0, "sparse", stream=short).__enter__()
        clk.advance(20.0)
        t.tick()
        t.close()
    assert short.getvalue() == ""


def _loads_file(tmp_path, shape=(2, 8)) -> str:
    path = tmp_path / "w.npz"
    np.savez(path, loads=np.arange(1, int(np.prod(shape)) + 1, dtype=np.float64).reshape(shape))
    return str(path)


def test_plan_reports_progress_with_the_flag(tmp_path, capsys):
    args = ["plan", "--loads", _loads_file(tmp_path), "--replicas", "16", "--gpus", "2", "--solver", "kk_swap",
            "--out", str(tmp_path / "p.json")]
    with fake_clock(FakeClock(step=1.0)):         # every reading a second later: the call "took" seconds
        assert main(args + ["--progress"]) == 0
    err = capsys.readouterr().err
    assert "kk_swap: " in err and " s of about " in err
    assert main(args) == 0                        # not a terminal, no flag: silent
    assert capsys.readouterr().err == ""


def test_simulate_and_sweep_count_what_they_replayed(capsys):
    g = torch.Generator().manual_seed(0)
    trace = torch.rand(12, 2, 8, generator=g) + 0.1
    with fake_clock(FakeClock(step=1.0)):
        simulate(trace, num_replicas=16, num_gpus=4, every=4, window=4, progress="lines")
    assert "simulate: 8/8 steps" in capsys.readouterr().err
    with fake_clock(FakeClock(step=1.0)):
        sweep(trace, periods=[4, 6], num_replicas=16, num_gpus=4, window=4, progress="lines")
    err = capsys.readouterr().err
    assert "sweep: 2/2 settings" in err and "simulate:" not in err
