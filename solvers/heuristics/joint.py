"""Replica counts chosen with the packing in the loop.

DeepSeek's replication minimises the largest replica, then packs; when GPUs hold few
slots the best counts are often different (take a replica from a hot expert, give a
"filler" replica to a colder one so that items pair up). :func:`joint_counts` is a
batched beam search over single replica moves (donor -> receiver): per round and row it
tries ``donors x receivers`` moves from each of ``beam`` states, packs every candidate
(all rows and candidates in one batch) and keeps the best distinct ones.
"""
from __future__ import annotations

import torch

from ..clock import clock
from .common import as_gpus, expand_items
from .packing import pack_counts

REL_TOL = 1e-12


def quick_objective(weight: torch.Tensor, logcnt: torch.Tensor, packs, steps: int) -> torch.Tensor:
    """Max GPU time after a fast packing (KK on identical GPUs, else LPT in time, + a few
    1-1 swaps). weight, logcnt: [Y, E] -> [Y]; packs: a view or a number of identical packs."""
    g = as_gpus(packs, int(logcnt[0].sum()) if logcnt.shape[0] else 0, weight.device)
    pairs = g.uniform and g.unit and g.R <= 2 * g.Q          # two per pack: KK's pairing is optimal
    return pack_counts(weight, logcnt, g, starts=("kk",), max_steps=0 if pairs else steps, two_swaps=False)[1]


def fixed_count_bound(weight: torch.Tensor, logcnt: torch.Tensor, num_packs: int) -> torch.Tensor:
    """Lower bound on the packed max for fixed counts: max of W/P and the pigeonhole bounds
    (among the j*P+1 largest items some pack holds j+1, plus S-j-1 items at least as
    large as the smallest ones), j = 0..S-1. weight, logcnt: [Y, E] -> [Y] float64.
    """
    item_e, item_w = expand_items(weight, logcnt)
    Y, R = item_w.shape
    P = num_packs
    S = R // P
    a = item_w.sort(dim=1, descending=True).values
    csum = torch.nn.functional.pad(a.cumsum(1), (1, 0))                            # [Y, R+1]
    j = torch.arange(S, device=a.device)
    top = csum[:, j * P + 1] - csum[:, j * P - j]                                  # a[jP-j .. jP]
    rest = csum[:, R:R + 1] - csum[:, R - (S - 1 - j)]                             # S-1-j smallest
    return torch.maximum((top + rest).max(1).values, csum[:, R] / P)


# Under a deadline a round's candidates are evaluated in chunks of columns (every row's
# likeliest moves first), each sized to fit the time left and to at most this share of
# it (at least MIN_CHUNK_SECONDS' worth): the search then stops within one small chunk of
# the deadline, keeping the best found so far, instead of finishing a round that can
# cost seconds (hundreds of packings at 33+ slots per GPU).
CHUNK_SHARE = 0.125
MIN_CHUNK_SECONDS = 0.05


def move_order(beam: int, donors: int, receivers: int, device) -> torch.Tensor:
    """[B*D*Q] candidate columns in the order a deadline-cut round evaluates them: by the
    sum of the donor's and receiver's ranks (the likeliest moves first), then by beam."""
    b, d, q = torch.meshgrid(torch.arange(beam), torch.arange(donors), torch.arange(receivers), indexing="ij")
    key = ((d + q) * beam + b).flatten()
    return key.argsort(stable=True).to(device)


def joint_counts(weight: torch.Tensor, logcnt: torch.Tensor, packs, *, cap: int | None = None,
                 rounds: int = 32, donors: int = 4, receivers: int = 4, beam: int = 4, steps: int = 4,
                 patience: int = 2, deadline: float | None = None,
                 evaluate: str = "pack") -> tuple[torch.Tensor, int]:
    """Beam search on replica counts. weight, logcnt: [X, E]; packs: a view or a number of
    identical packs ("bound" needs identical ones); returns (logcnt [X, E], rounds run).

    Each round every beam state spawns ``donors x receivers`` single-replica moves:
    donors are experts with c > 1 whose items grow least (smallest w/(c-1)), receivers
    the largest items w/c (below ``cap``). All candidates of all rows are packed in one
    batch; the ``beam`` best distinct ones survive (so the search can cross a worse
    state: a pure hill climb stalls at 210 on the 8-expert example, the beam reaches 200).
    Stops after ``patience`` rounds without a better best. ``deadline`` (a
    :func:`~solvers.clock.clock` value): the candidates are evaluated in chunks (see
    :data:`CHUNK_SHARE`), a chunk starts only when its cost, estimated from the previous
    one, fits before the deadline, and a round cut short keeps its best evaluated
    candidate and ends the search (it counts in the rounds returned).
    ``evaluate="bound"`` scores a candidate by :func:`fixed_count_bound` instead of
    packing it (cheap; good when GPUs hold many slots and a good packing lands on the bound).
    """
    if evaluate == "bound":
        def objective(wt, ct):
            return fixed_count_bound(wt, ct, packs if isinstance(packs, int) else packs.Q)
    else:
        def objective(wt, ct):
            return quick_objective(wt, ct, packs, steps)
    X, E = weight.shape
    dev = weight.device
    best_cnt = logcnt.clone()
    if X == 0 or (deadline is not None and clock() >= deadline):
        return best_cnt, 0
    w = weight.to(torch.float64)
    began = clock()
    best_obj = objective(w, best_cnt)
    per_row = (clock() - began) / X              # seconds per evaluated row, last measured
    B, D, Q = beam, min(donors, E), min(receivers, E)
    M = B * D * Q
    columns = move_order(B, D, Q, dev)
    states = best_cnt.unsqueeze(1).repeat(1, B, 1)                                  # [X, B, E]
    salt = torch.randint(1, 2**31 - 1, (E,), generator=torch.Generator().manual_seed(0)).to(dev)
    rows = torch.arange(X, device=dev).unsqueeze(1)
    done = stall = 0
    for _ in range(rounds):
        c = states.to(torch.float64)
        wb = w.unsqueeze(1)
        dkey = torch.where(states > 1, wb / (c - 1).clamp_min(1), torch.full_like(c, float("inf")))
        rkey = (wb / c).expand_as(c)
        if cap is not None:
            rkey = rkey.masked_fill(states >= cap, -1.0)
        dsel = dkey.topk(D, dim=2, largest=False)                                  # [X, B, D]
        rsel = rkey.topk(Q, dim=2)                                                  # [X, B, Q]
        d_idx = dsel.indices.view(X, B, D, 1).expand(X, B, D, Q)
        r_idx = rsel.indices.view(X, B, 1, Q).expand(X, B, D, Q)
        valid = (torch.isfinite(dsel.values).view(X, B, D, 1) & (rsel.values >= 0).view(X, B, 1, Q)
                 & (d_idx != r_idx))
        cand = states.view(X, B, 1, 1, E).repeat(1, 1, D, Q, 1)                   # [X, B, D, Q, E]
        cand.scatter_add_(4, d_idx.unsqueeze(4), -valid.unsqueeze(4).to(torch.int64))
        cand.scatter_add_(4, r_idx.unsqueeze(4), valid.unsqueeze(4).to(torch.int64))
        cand = cand.view(X, M, E)
        obj = torch.full((X, M), float("inf"), dtype=torch.float64, device=dev)
        evaluated = 0
        while evaluated < M:
            k = M - evaluated
            if deadline is not None:
                left = deadline - clock()
                fit = int(min(left, max(left * CHUNK_SHARE, MIN_CHUNK_SECONDS)) / max(per_row * X, 1e-9))
                k = min(k, fit)
                if k < 1:
                    break                        # not one more column fits before the deadline
            cols = columns[evaluated:evaluated + k]
            t0 = clock()
            obj[:, cols] = objective(w.repeat_interleave(k, 0), cand[:, cols].reshape(-1, E)).view(X, k)
            per_row = (clock() - t0) / (X * k)
            evaluated += k
        if evaluated == 0:
            break
        obj = obj.masked_fill(~valid.view(X, M), float("inf"))
        # distinct states only: drop a candidate whose hash an earlier (better) one has
        obj, order = obj.sort(dim=1, stable=True)
        h = (cand * salt).sum(2).gather(1, order)                                   # [X, M]
        earlier = torch.ones(M, M, dtype=torch.bool, device=dev).tril(-1)
        dup = ((h.unsqueeze(2) == h.unsqueeze(1)) & earlier).any(2)
        obj = obj.masked_fill(dup, float("inf"))
        top = obj.topk(B, dim=1, largest=False)
        keep = order.gather(1, top.indices)                                         # [X, B]
        states = cand[rows, keep]
        done += 1
        round_best, arg = top.values.min(1)
        ok = round_best < best_obj * (1 - REL_TOL)
        best_cnt = torch.where(ok.unsqueeze(1), states[torch.arange(X, device=dev), arg], best_cnt)
        best_obj = torch.where(ok, round_best, best_obj)
        if evaluated < M:
            break                                # cut by the deadline
        stall = 0 if bool(ok.any()) else stall + 1
        if stall >= patience:
            break
    return best_cnt, done
