"""The network between GPUs: what a weight transfer costs, per link class.

A move copies one expert's weights to a GPU that did not hold it (docs/dynamics.md,
"Transfer schedules"). How long it takes depends on the link it crosses:

- ``intra``: GPU to GPU inside a node, over NVLink / NVSwitch;
- ``inter``: GPU to GPU across nodes, over the GPU's own InfiniBand / RoCE NIC;
- ``host``: from the receiving GPU's host memory over PCIe (TensorRT-LLM keeps a copy of
  every expert there); only when ``host_bw`` is set.

Bandwidths are bytes per second *per GPU and direction*, what one copy achieves on an idle
link. Defaults (documented in docs/dynamics.md):

- intra 400e9 B/s: H100 / H200 SXM NVLink 4 is 450 GB/s per direction; large
  peer-to-peer copies reach about 90 % of it;
- inter 50e9 B/s: one 400 Gb/s NDR InfiniBand NIC per GPU (DeepSeek's and most H100
  clusters' rail-optimised fabric);
- host None (host memory is not a source); PCIe Gen5 x16 would be about 55e9.

This module imports no torch: the CLI builds a :class:`Network` before loading it.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from .errors import ProblemError

# Link classes, slowest-first order is computed from the bandwidths, not assumed.
LINK_CLASSES = ("intra", "inter", "host")

DEFAULT_INTRA_NODE_BW = 400e9
DEFAULT_INTER_NODE_BW = 50e9
# Far beyond any real link (1 EB/s): a bandwidth this large is a typo in units. Far below
# any real one (1 MB/s, a thousandth of a slow NIC): an expert copy (< 2**63 bytes) then takes
# at most about 1e13 s, so stalls, makespans and their sums stay finite.
MAX_BW = 1e18
MIN_BW = 1e6


def _bandwidth(value: Any, param: str, unit: float = 1.0) -> float:
    """A bandwidth in [MIN_BW, MAX_BW] bytes/s, given in units of ``unit`` bytes/s (1e9: GB/s,
    the CLI's); the message speaks that unit."""
    name = "bytes/s" if unit == 1.0 else "GB/s"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ProblemError(param, f"must be a number of {name}, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or not MIN_BW / unit <= value <= MAX_BW / unit:
        raise ProblemError(param, f"must be in [{MIN_BW / unit:g}, {MAX_BW / unit:g}] {name}, got {value!r}")
    return value * unit


@dataclass(frozen=True)
class Network:
    """Per-GPU link bandwidths in bytes/s (module docstring); checked once at construction.

    intra_node_bw: GPU to GPU on one node; inter_node_bw: GPU to GPU across nodes;
    host_bw: host memory to GPU (None: host memory is not a source).
    """

    intra_node_bw: float = DEFAULT_INTRA_NODE_BW
    inter_node_bw: float = DEFAULT_INTER_NODE_BW
    host_bw: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "intra_node_bw", _bandwidth(self.intra_node_bw, "intra_node_bw"))
        object.__setattr__(self, "inter_node_bw", _bandwidth(self.inter_node_bw, "inter_node_bw"))
        if self.host_bw is not None:
            object.__setattr__(self, "host_bw", _bandwidth(self.host_bw, "host_bw"))

    def bandwidth(self, link: str) -> float:
        """Bytes/s of one link class (``intra``, ``inter`` or ``host``)."""
        if link == "intra":
            return self.intra_node_bw
        if link == "inter":
            return self.inter_node_bw
        if link == "host" and self.host_bw is not None:
            return self.host_bw
        raise ProblemError("link", f"must be one of {', '.join(self.links())}, got {link!r}")

    def links(self) -> tuple[str, ...]:
        """The link classes this network has (host only with ``host_bw``)."""
        return LINK_CLASSES if self.host_bw is not None else LINK_CLASSES[:2]

    def seconds(self, nbytes: float, link: str) -> float:
        """Seconds one copy of ``nbytes`` takes over ``link``."""
        return float(nbytes) / self.bandwidth(link)

    def as_dict(self) -> dict[str, float | None]:
        return {"intra_node_bw": self.intra_node_bw, "inter_node_bw": self.inter_node_bw, "host_bw": self.host_bw}

    def describe(self) -> str:
        host = "" if self.host_bw is None else f", host {self.host_bw / 1e9:g} GB/s"
        return f"links intra-node {self.intra_node_bw / 1e9:g} GB/s, inter-node {self.inter_node_bw / 1e9:g} GB/s{host}"

    @classmethod
    def from_gbps(cls, intra: float | None = None, inter: float | None = None, host: float | None = None) -> "Network":
        """A network from GB/s (1e9 bytes/s), the CLI's unit; None keeps the default (no host)."""
        return cls(DEFAULT_INTRA_NODE_BW if intra is None else _bandwidth(intra, "intra_node_bw", 1e9),
                   DEFAULT_INTER_NODE_BW if inter is None else _bandwidth(inter, "inter_node_bw", 1e9),
                   None if host is None else _bandwidth(host, "host_bw", 1e9))


DEFAULT_NETWORK = Network()
