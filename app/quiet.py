"""Streamlit's warnings about a missing runtime, dropped where the app runs Streamlit code
before the runtime exists on purpose (``python -m app.serve`` imports the cached functions
and fills their stores before the server starts).

Defining or calling a cached function outside a session warns "No runtime found" (and the
script-run context warns "missing ScriptRunContext"): ten lines in ``make run``'s output
that mean nothing there. A filter, not a level: Streamlit resets its loggers' levels when it
reads its config.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Iterator

LOGGERS = ("streamlit.runtime.caching.cache_data_api", "streamlit.runtime.caching.cache_resource_api",
           "streamlit.runtime.scriptrunner_utils.script_run_context")


class _DropWarnings(logging.Filter):
    """Drops warnings (and below) of the logger it is added to."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING


@contextlib.contextmanager
def outside_runtime() -> Iterator[None]:
    """Within: the runtime warnings of :data:`LOGGERS` are dropped (errors still show)."""
    loggers = [logging.getLogger(name) for name in LOGGERS]
    drop = _DropWarnings()
    for q in loggers:
        q.addFilter(drop)
    try:
        yield
    finally:
        for q in loggers:
            q.removeFilter(drop)
