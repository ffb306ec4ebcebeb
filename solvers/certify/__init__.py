"""Certification at production scale: plans polished toward, and bounds raised toward,
the optimum, so that a plan's gap is closed by one side or the other (docs/certify.md)."""
from .api import CERTIFY_OPTIONS, solve_certify

__all__ = ["CERTIFY_OPTIONS", "solve_certify"]
