"""A placement plan in DeepSeek's tensor format (the interchange format of vLLM and SGLang).

phy2log: [layers, replicas]    logical expert held by each physical slot
log2phy: [layers, experts, K]  slots of each expert's replicas in rank order, padded with -1
logcnt:  [layers, experts]     replica count of each expert (>= 1, rows sum to replicas)

Slot ``p`` lives on GPU ``p // S`` (S slots per GPU) and node ``gpu // (P / N)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .errors import PlanError


def _as_index_tensor(x: Any, name: str, dims: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(np.asarray(x))
        except (ValueError, TypeError) as exc:
            raise PlanError(name, f"must be a rectangular integer array ({exc})") from None
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise PlanError(name, f"must hold integers, got dtype {x.dtype}")
    if x.dim() != dims:
        raise PlanError(name, f"must be {dims}-D, got shape {tuple(x.shape)}")
    return x.to(torch.int64)


def replica_ranks(phy2log: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Replica rank of every slot (its order among the slots of the same expert) and counts.

    phy2log: [L, R] -> rank: [L, R], logcnt: [L, E]. Vectorised over layers.
    """
    L, R = phy2log.shape
    logcnt = torch.zeros(L, num_experts, dtype=torch.int64, device=phy2log.device)
    logcnt.scatter_add_(1, phy2log, torch.ones_like(phy2log))
    order = torch.sort(phy2log, dim=1, stable=True).indices          # slots grouped by expert
    first = torch.cumsum(logcnt, dim=1) - logcnt                      # first sorted position of each expert
    pos = torch.arange(R, device=phy2log.device).expand(L, R)
    rank_sorted = pos - first.gather(1, phy2log.gather(1, order))
    rank = torch.empty_like(phy2log).scatter_(1, order, rank_sorted)
    return rank, logcnt


def build_log2phy(phy2log: torch.Tensor, rank: torch.Tensor, logcnt: torch.Tensor) -> torch.Tensor:
    """log2phy: [L, E, K] from slot ranks, K = max count over the whole tensor, padded with -1."""
    L, R = phy2log.shape
    E = logcnt.shape[1]
    K = int(logcnt.max()) if logcnt.numel() else 1
    log2phy = torch.full((L, E, K), -1, dtype=torch.int64, device=phy2log.device)
    slots = torch.arange(R, dtype=torch.int64, device=phy2log.device).expand(L, R)
    log2phy.view(L, -1).scatter_(1, phy2log * K + rank, slots)
    return log2phy


@dataclass(frozen=True)
class Plan:
    phy2log: torch.Tensor
    log2phy: torch.Tensor
    logcnt: torch.Tensor

    @classmethod
    def from_phy2log(cls, phy2log: Any, num_experts: int) -> "Plan":
        """The plan whose replicas are ranked in slot order; checks ids are in range."""
        p2l = _as_index_tensor(phy2log, "phy2log", 2)
        if p2l.numel() and (bool((p2l < 0).any()) or bool((p2l >= num_experts).any())):
            raise PlanError("phy2log", f"expert ids must be in [0, {num_experts}), "
                            f"found {int(p2l.min())}..{int(p2l.max())}")
        rank, logcnt = replica_ranks(p2l, num_experts)
        return cls(p2l, build_log2phy(p2l, rank, logcnt), logcnt)

    @classmethod
    def from_tensors(cls, phy2log: Any, log2phy: Any, logcnt: Any) -> "Plan":
        return cls(_as_index_tensor(phy2log, "phy2log", 2), _as_index_tensor(log2phy, "log2phy", 3),
                   _as_index_tensor(logcnt, "logcnt", 2))

    # Sizes ---------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return self.phy2log.shape[0]

    @property
    def num_replicas(self) -> int:
        return self.phy2log.shape[1]

    @property
    def num_experts(self) -> int:
        return self.logcnt.shape[1]

    @property
    def device(self) -> torch.device:
        return self.phy2log.device

    def to(self, device: str | torch.device) -> "Plan":
        return Plan(self.phy2log.to(device), self.log2phy.to(device), self.logcnt.to(device))

    def layer(self, index: int) -> "Plan":
        """The plan of one layer, re-padded so K is that layer's max count."""
        return Plan.from_phy2log(self.phy2log[index:index + 1], self.num_experts)

    def as_tuple(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.phy2log, self.log2phy, self.logcnt

    def validate(self, num_layers: int | None = None, num_experts: int | None = None,
                 num_replicas: int | None = None, num_gpus: int | None = None) -> "Plan":
        """Raise :class:`PlanError` unless the plan is well formed (and fits the given sizes)."""
        p2l, l2p, cnt = self.phy2log, self.log2phy, self.logcnt
        for name, t, dims in (("phy2log", p2l, 2), ("log2phy", l2p, 3), ("logcnt", cnt, 2)):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.dim() != dims:
                raise PlanError(name, f"must be a {dims}-D int64 tensor")
        L, R = p2l.shape
        E = cnt.shape[1]
        if cnt.shape[0] != L or l2p.shape[0] != L:
            raise PlanError("logcnt", f"layer counts differ: phy2log {L}, logcnt {cnt.shape[0]}, "
                            f"log2phy {l2p.shape[0]}")
        if l2p.shape[1] != E:
            raise PlanError("log2phy", f"must have {E} experts like logcnt, got {l2p.shape[1]}")
        for name, want, got in (("num_layers", num_layers, L), ("num_experts", num_experts, E),
                                ("num_replicas", num_replicas, R)):
            if want is not None and want != got:
                raise PlanError(name, f"plan has {got}, problem has {want}")
        if num_gpus is not None and R % num_gpus != 0:
            raise PlanError("num_gpus", f"plan's {R} slots do not split over {num_gpus} GPUs")
        if R < E:
            raise PlanError("phy2log", f"has {R} slots for {E} experts")
        if bool((p2l < 0).any()) or bool((p2l >= E).any()):
            raise PlanError("phy2log", f"expert ids must be in [0, {E})")
        if bool((cnt < 1).any()):
            raise PlanError("logcnt", "every expert needs at least one replica")
        if bool((cnt.sum(1) != R).any()):
            raise PlanError("logcnt", f"every layer's counts must sum to {R} slots")
        rank, actual = replica_ranks(p2l, E)
        if not torch.equal(actual, cnt):
            raise PlanError("logcnt", "does not match the replicas in phy2log")
        K = l2p.shape[2]
        if K < int(cnt.max()):
            raise PlanError("log2phy", f"has room for {K} replicas, an expert has {int(cnt.max())}")
        if K == int(cnt.max()) and torch.equal(l2p, build_log2phy(p2l, rank, cnt)):
            return self      # the usual case: replicas ranked in slot order (one comparison, not ten masks)
        valid = torch.arange(K, device=l2p.device) < cnt.unsqueeze(-1)     # [L, E, K]
        if bool((l2p[~valid] != -1).any()):
            raise PlanError("log2phy", "entries past an expert's count must be -1")
        slots = torch.where(valid, l2p, torch.zeros_like(l2p))
        if bool((slots < 0).any()) or bool((slots >= R).any()):
            raise PlanError("log2phy", f"slot ids must be in [0, {R})")
        experts = torch.arange(E, device=l2p.device).view(1, E, 1).expand_as(l2p)
        held = p2l.gather(1, slots.view(L, -1)).view_as(l2p)
        if bool((held != experts)[valid].any()):
            raise PlanError("log2phy", "lists a slot that phy2log gives to another expert")
        covered = torch.zeros(L, R, dtype=torch.int64, device=l2p.device)
        covered.scatter_add_(1, slots.view(L, -1), valid.view(L, -1).to(torch.int64))
        if bool((covered != 1).any()):
            raise PlanError("log2phy", "must list every slot exactly once")
        return self

    def to_dict(self) -> dict[str, list]:
        return {"phy2log": self.phy2log.tolist(), "log2phy": self.log2phy.tolist(),
                "logcnt": self.logcnt.tolist()}
