"""The ``eplb`` command line.

    eplb plan    --loads SPEC (--model NAME | --groups G) --replicas R --nodes N --gpus P
                 [--solver NAME] [--policy auto|hierarchical|global] [-O KEY=VALUE ...] --out plan.json
    eplb score   --loads SPEC --plan PLAN [--previous PLAN] [--expert-bytes B] [--per-gpu] [--json]
    eplb compare --loads SPEC (--model NAME | ...) [--solvers a,b] [--policy global,hierarchical]
                 [--holdout A:B] [--previous PLAN] [--out DIR]
    eplb solvers [--json]
    eplb generate | convert | datasets | bench run | recommend | simulate | sweep | microbatch

Modules: :mod:`.args` (what commands share), :mod:`.parser` (every command's arguments, no
torch), :mod:`.commands` (name -> implementation) and one module per command or group
(:mod:`.plan`, :mod:`.score`, :mod:`.compare`, :mod:`.catalogue`, :mod:`.workloads`,
:mod:`.bench`, :mod:`.dynamics`, :mod:`.dispatch`).

Bad input prints one line on stderr and exits with status 2 (:data:`EXIT_USAGE`), whatever
exception a reader raised on it (the line names the input); an exception the code did not
expect is a bug: one line saying so and where to report it, status 1 (:data:`EXIT_BUG`). The
traceback only with the global ``--debug`` (``eplb --debug plan ...``). Never a traceback
otherwise.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Sequence

from ..errors import EPLBError
from . import args as _args
from .args import EXIT_BUG, EXIT_USAGE, LOADS_HELP, fail
from .parser import SOLVER_OPTIONS_HELP, build_parser
from .preflight import check_inputs


def _terminated(signum, frame):  # noqa: ARG001
    # SIGTERM unwinds like Ctrl-C, so temporary files and solver scratch directories are
    # removed by their ``finally`` blocks instead of being left behind.
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    try:
        return _main(argv)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    _args.ARGV[:] = list(sys.argv[1:] if argv is None else argv)
    debug = _args.debug_flag(_args.ARGV)
    try:
        args = build_parser().parse_args(_args.ARGV)
        check_inputs(args)
        # The one function-level import between project modules: the implementations (torch,
        # every solver) load only once the arguments are parsed, so --help and --version
        # answer without importing torch; and then only the one command's module loads.
        from ..grading import SolverBug
        from .commands import handler

        try:
            code = int(handler(args.handler)(args) or 0)
            sys.stdout.flush()                     # a closed pipe shows here, not at interpreter exit
            return code
        except SolverBug as exc:  # not the user's fault: say so
            return _args.report_bug(exc, debug, str(exc))
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else fail(exc.code)
    except EPLBError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return fail("interrupted")
    except BrokenPipeError:
        # `eplb score ... | head`: the reader left; say nothing (as cat and grep do) and keep
        # Python from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141                                 # 128 + SIGPIPE, what a shell reports
    except OSError as exc:
        return fail(f"{exc.filename or ''}: {exc.strerror or exc}".strip(": "))
    except Exception as exc:  # noqa: BLE001  (the last line of defence: one line, never a traceback)
        return _args.unexpected(exc, debug)


__all__ = ["main", "build_parser", "LOADS_HELP", "SOLVER_OPTIONS_HELP", "EXIT_USAGE", "EXIT_BUG"]
