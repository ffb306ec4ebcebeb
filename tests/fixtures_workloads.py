"""Writers of engine dump fixtures, from the formats' descriptions (docs/formats.md and the
engines' documented dump layouts), independent of the library's own writers.

Sizes are realistic: DeepSeek-V3 shapes (58 layers, 256 experts, 288 physical slots on
32 EP ranks) with tens of steps.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from solvers.workloads import generate

L, E, R, RANKS = 58, 256, 288, 32


def ground_truth(steps: int = 12, seed: int = 0, layers: int = L) -> torch.Tensor:
    """loads [steps, layers, 256] int64 from the generator (what a dump should give back)."""
    return generate("deepseek-v3", "skewed", steps=steps, seed=seed, num_layers=layers,
                    tokens_per_step=2048).loads


def replicated_phy2log(layers: int, seed: int = 0) -> torch.Tensor:
    """phy2log [layers, 288]: every expert once plus 32 random redundant replicas, shuffled."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(layers):
        extra = torch.randint(0, E, (R - E,), generator=g)
        row = torch.cat([torch.arange(E), extra])
        rows.append(row[torch.randperm(R, generator=g)])
    return torch.stack(rows)


def split_over_replicas(loads: torch.Tensor, p2l: torch.Tensor) -> torch.Tensor:
    """physical counts [steps, layers, R]: each expert's tokens split over its replicas
    (integer even split, the remainder on the first replica), as an engine would route."""
    T = loads.shape[0]
    cnt = torch.zeros(p2l.shape[0], E, dtype=torch.int64).scatter_add_(1, p2l, torch.ones_like(p2l))
    share = loads.gather(2, p2l.expand(T, *p2l.shape)) // cnt.gather(1, p2l)          # [T, L, R]
    first = torch.zeros_like(p2l, dtype=torch.bool)
    seen = torch.zeros(p2l.shape[0], E, dtype=torch.bool)
    for p in range(R):  # fixture set-up: mark the first slot of each expert
        first[:, p] = ~seen.gather(1, p2l[:, p:p + 1]).squeeze(1)
        seen.scatter_(1, p2l[:, p:p + 1], True)
    given = torch.zeros(T, p2l.shape[0], E, dtype=torch.int64).scatter_add_(2, p2l.expand(T, *p2l.shape), share)
    rest = (loads - given).gather(2, p2l.expand(T, *p2l.shape))
    return share + torch.where(first, rest, torch.zeros_like(rest))


def write_sglang_stat(path: Path, loads: torch.Tensor) -> Path:
    torch.save({"rank": 0, "logical_count": loads.to(torch.int32),
                "average_utilization_rate_over_window": None}, path)
    return path


def write_sglang_per_pass(directory: Path, loads: torch.Tensor, p2l: torch.Tensor) -> list[Path]:
    """One file per rank, like ``expert_distribution_recorder_{time}_{rank}.pt``: each record's
    global_physical_count is zero outside the rank's own slots (local -> global conversion)."""
    directory.mkdir(parents=True, exist_ok=True)
    phys = split_over_replicas(loads, p2l)                                        # [T, L, R]
    local = R // RANKS
    paths = []
    for rank in range(RANKS):
        records = []
        for t in range(phys.shape[0]):
            g = torch.zeros(p2l.shape[0], R, dtype=torch.int32)
            g[:, rank * local:(rank + 1) * local] = phys[t, :, rank * local:(rank + 1) * local]
            records.append({"forward_pass_id": 100 + t, "rank": rank, "gatherer_key": "primary",
                            "global_physical_count": g})
        path = directory / f"expert_distribution_recorder_1700000000.0_{rank}.pt"
        torch.save({"records": records, "last_physical_to_logical_map": p2l.clone()}, path)
        paths.append(path)
    return paths


def write_vllm_history(path: Path, loads: torch.Tensor, indent: int | None = None) -> Path:
    """``{"load_history": [{"logical_expert_load": [[...] per layer]}, ...]}`` plus the
    extra fields a recorder adds (step ids, timestamps, model name)."""
    doc = {"model": "deepseek-ai/DeepSeek-V3", "num_logical_experts": loads.shape[2],
           "load_history": [{"step": t, "timestamp": 1700000000.5 + t, "logical_expert_load": step}
                            for t, step in enumerate(loads.tolist())]}
    path.write_text(json.dumps(doc, indent=indent))
    return path


def write_megatron(directory: Path, loads: torch.Tensor, ep_size: int = 8, pp_size: int = 2,
                   first_layer: int = 4, seed: int = 0) -> list[Path]:
    """Per-rank ``.npz``: ``loads [local_layers, forwards, experts]`` = the tokens this EP rank
    routed to every expert (a random share of the total), ``ep_rank``, ``ep_size``,
    ``layer_numbers`` (1-based global numbers; pipeline stage s holds a contiguous block)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    total = loads.permute(1, 0, 2).numpy()                                          # [L, T, E]
    # Split every count over the EP ranks with a multinomial: shares sum back exactly.
    shares = rng.multinomial(total.reshape(-1), np.full(ep_size, 1.0 / ep_size))   # [L*T*E, ep]
    shares = shares.reshape(*total.shape, ep_size)
    per_stage = np.array_split(np.arange(total.shape[0]), pp_size)
    paths = []
    for stage, layers in enumerate(per_stage):
        for rank in range(ep_size):
            path = directory / f"moe_loads_pp{stage}_ep{rank}.npz"
            np.savez(path, loads=shares[layers, :, :, rank].astype(np.int64), ep_rank=np.int64(rank),
                     ep_size=np.int64(ep_size), layer_numbers=(layers + first_layer).astype(np.int64))
            paths.append(path)
    return paths


def write_long_csv(path: Path, loads: torch.Tensor, with_step: bool = True) -> Path:
    T, Lx, Ex = loads.shape
    lines = ["step,layer,expert,load" if with_step else "layer,expert,load"]
    for t in range(T if with_step else 1):
        for layer in range(Lx):
            for e in range(Ex):
                v = int(loads[t, layer, e])
                lines.append(f"{t},{layer},{e},{v}" if with_step else f"{layer},{e},{v}")
    path.write_text("\n".join(lines) + "\n")
    return path
