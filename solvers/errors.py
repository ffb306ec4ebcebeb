"""Errors raised for bad input.

Every error is a ``ValueError`` subclass that names the offending parameter, so a
caller can catch ``ValueError`` (or :class:`EPLBError`) and show ``str(err)`` as one
readable line.
"""
from __future__ import annotations


class EPLBError(ValueError):
    """Base class: ``param`` names the bad parameter, the message states the rule."""

    def __init__(self, param: str, message: str):
        self.param = param
        super().__init__(f"{param}: {message}")


class ProblemError(EPLBError):
    """Invalid loads or cluster shape."""


class PlanError(EPLBError):
    """A plan that is malformed or does not fit its problem."""


class OptionError(EPLBError):
    """Unknown solver, unknown option, or an option value out of range."""


class LoadFileError(EPLBError):
    """A loads or plan file that cannot be read or has the wrong content."""
