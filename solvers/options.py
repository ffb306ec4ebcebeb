"""Option schemas: one vocabulary for every solver, declared at ``register``.

Each solver declares its keyword-only options as :class:`Option` objects: type, default,
choices or range, and one line of help. :func:`solvers.solve` validates values against
the schema in one place (:func:`validate_options`), ``eplb solvers`` prints it, the app
builds its widgets from it and the benchmark harness reads the time and thread options
from it.

The shared names (use these, never a synonym):

- ``policy``: "auto" | "hierarchical" | "global" (auto = hierarchical when G % N == 0);
- ``colocation``: "allowed" | "forbidden" (two replicas of one expert on one GPU);
- ``time_limit``: seconds for the whole solve; ``threads``; ``seed``.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from .cluster import POLICIES
from .errors import OptionError

TYPES = (bool, int, float, str, object)


@dataclass(frozen=True)
class Option:
    """One solver option.

    type: bool, int, float, str, or object (free-form: a plan, an array; not a widget).
    choices: allowed values (str options). minimum / maximum: inclusive range (numbers);
    ``exclusive_minimum`` makes the minimum strict (a time limit must be > 0).
    nullable: None is allowed too. advanced: hidden behind "more options" in front ends.
    role: what a front end or the harness may do with it ("time_limit", "threads", "seed").
    """

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    nullable: bool = False
    advanced: bool = False
    role: str | None = None
    items: tuple[str, ...] | None = None   # str options: a comma-separated list of these names

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise TypeError(f"option {self.name!r}: type must be one of {TYPES}, got {self.type!r}")
        if self.default is not None or not self.nullable:
            if self.type is not object:
                self.validate(self.default)

    def validate(self, value: Any) -> Any:
        """The value, normalised (an int where a float is asked becomes a float);
        anything outside the schema raises :class:`OptionError` naming the option."""
        name = self.name
        if value is None:
            if self.nullable:
                return None
            raise OptionError(name, "must not be None")
        if self.type is object:
            return value
        if self.type is bool:
            if not isinstance(value, bool):
                raise OptionError(name, f"must be true or false, got {value!r}")
            return value
        if self.type is str:
            if not isinstance(value, str):
                raise OptionError(name, f"must be a string, got {value!r}")
            if self.choices is not None and value not in self.choices:
                raise OptionError(name, f"must be one of {', '.join(map(str, self.choices))}, got {value!r}")
            if self.items is not None and any(n.strip() not in self.items for n in value.split(",")):
                raise OptionError(name, f"must name {', '.join(self.items)} (comma-separated), got {value!r}")
            return value
        integer = self.type is int
        kinds = numbers.Integral if integer else numbers.Real
        if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(float(value)):
            raise OptionError(name, f"must be a finite {'integer' if integer else 'number'}, got {value!r}")
        value = int(value) if integer else float(value)
        lo, hi = self.minimum, self.maximum
        if lo is not None and (value < lo or (self.exclusive_minimum and value == lo)):
            raise OptionError(name, f"must be {'>' if self.exclusive_minimum else '>='} {lo:g}, got {value!r}")
        if hi is not None and value > hi:
            raise OptionError(name, f"must be <= {hi:g}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise OptionError(name, f"must be one of {', '.join(map(str, self.choices))}, got {value!r}")
        return value

    def describe(self) -> str:
        """The allowed values in a few words (for tables and --help)."""
        if self.choices is not None:
            text = " | ".join(map(str, self.choices))
        elif self.type in (int, float):
            lo = "" if self.minimum is None else f"{'>' if self.exclusive_minimum else '>='} {self.minimum:g}"
            hi = "" if self.maximum is None else f"<= {self.maximum:g}"
            text = f"{self.type.__name__} {', '.join(x for x in (lo, hi) if x)}".strip()
        elif self.type is object:
            text = "object"
        else:
            text = self.type.__name__
        return text + (" or none" if self.nullable else "")

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-friendly description (for `eplb solvers --json` and the app)."""
        return {"name": self.name, "type": self.type.__name__, "default": _plain(self.default),
                "help": self.help, "choices": list(self.choices) if self.choices else None,
                "minimum": self.minimum, "maximum": self.maximum,
                "exclusive_minimum": self.exclusive_minimum, "nullable": self.nullable,
                "advanced": self.advanced, "role": self.role}


def _plain(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else repr(v)


# The shared options, one definition each ------------------------------------------------

def policy_option(default: str = "auto") -> Option:
    return Option("policy", str, default, "placement policy: hierarchical keeps whole expert groups on a "
                  "node; global ignores nodes; auto = hierarchical when groups divide by nodes",
                  choices=POLICIES)


def colocation_option(default: str = "allowed") -> Option:
    return Option("colocation", str, default, "two replicas of one expert on one GPU: allowed or forbidden",
                  choices=("allowed", "forbidden"))


def time_limit_option(default: float = 10.0, help: str = "seconds for the whole solve (all layers)") -> Option:
    return Option("time_limit", float, default, help, minimum=0.0, exclusive_minimum=True,
                  maximum=86400.0, role="time_limit")


def threads_option(default: int = 2) -> Option:
    return Option("threads", int, default, "solver worker threads", minimum=1, maximum=256,
                  advanced=True, role="threads")


def seed_option(default: int = 0) -> Option:
    return Option("seed", int, default, "random seed", minimum=0, maximum=2**31 - 1, advanced=True,
                  role="seed")


# Bytes of one routed expert (what one move transfers): the one rule of every entry that takes
# it (the scorer, transfer schedules, simulate's settings, the CLI's --expert-bytes): None or a
# whole number of bytes (a bool or 1.5 is a mistake) in [0, 2**62] (bytes summed over every
# move of a long replay stay exact in int64).
EXPERT_BYTES = Option("expert_bytes", int, None, "bytes per expert", minimum=0, maximum=2**62, nullable=True)


def check_expert_bytes(value: Any) -> int | None:
    """``value`` checked by :data:`EXPERT_BYTES` (OptionError naming ``expert_bytes``)."""
    return EXPERT_BYTES.validate(value)


# Validation ---------------------------------------------------------------------------

def validate_options(solver: str, schema: Iterable[Option], options: dict[str, Any]) -> dict[str, Any]:
    """Every option in effect (defaults included), validated; unknown names raise OptionError."""
    schema = tuple(schema)
    by_name = {o.name: o for o in schema}
    for key in options:
        if not isinstance(key, str) or not key:
            raise OptionError("option", f"option names must be non-empty strings, got {key!r}")
    unknown = sorted(set(options) - set(by_name))
    if unknown:
        allowed = ", ".join(by_name) or "none"
        raise OptionError(unknown[0], f"is not an option of solver {solver!r} (options: {allowed})")
    return {o.name: o.validate(options[o.name]) if o.name in options else o.default for o in schema}


class SolverOptions(Mapping):
    """Base of every solver's typed options: a frozen dataclass (one field per schema
    option, made by :func:`options_class`) whose values the schema has checked, once.

    It reads as a mapping too (``opts["time_limit"]``, ``dict(opts)``, ``**opts``), so a
    front end can show or store it as plain values.
    """

    schema: tuple[Option, ...] = ()
    solver: str = ""

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self.schema)

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(o.name for o in cls.schema)

    @classmethod
    def parse(cls, values: Mapping[str, Any] | None = None) -> "SolverOptions":
        """Checked against the schema (unknown names and bad values raise OptionError), defaults filled."""
        return cls(**validate_options(cls.solver, cls.schema, dict(values or {})))

    def as_dict(self) -> dict[str, Any]:
        return dict(self)


def options_class(solver: str, schema: Iterable[Option]) -> type[SolverOptions]:
    """The frozen dataclass of ``solver``'s options (``KkSwapOptions`` for ``kk_swap``)."""
    schema = tuple(schema)
    name = "".join(part.capitalize() for part in solver.replace("-", "_").split("_")) + "Options"
    fields = [(o.name, o.type if o.type is not object else Any, dataclasses.field(default=o.default))
              for o in schema]
    return dataclasses.make_dataclass(name, fields, bases=(SolverOptions,), frozen=True,
                                      namespace={"schema": schema, "solver": solver})
def option_by_role(schema: Iterable[Option], role: str) -> Option | None:
    """The option playing ``role`` ("time_limit", "threads", "seed") in a schema, if any."""
    return next((o for o in schema if o.role == role), None)
