"""Move-minimal search for the elastic re-plan: every step is the change that removes the
most excess time per move added, batched over layers.

A layout ``e: [X, R]`` (phy2log rows on the live slots) is judged by its *excess*:
``sum over GPUs of max(0, time_g - target)``; a layer meets its target when the excess is
0. Two kinds of change, each counted in moves exactly as the shared scorer counts them (a
(GPU, expert) pair the plan in force did not have; a pair a GPU held before costs nothing
to bring back, and undoing a pair that was a move saves one):

- **replace** slot r (GPU g, expert x with >= 2 replicas) by expert y: one replica fewer of
  x (its other replicas grow), one more of y (its replicas on every GPU shrink), g's load
  changes by the difference. This single move relieves every GPU holding a hot expert at
  once, and is how orphans (experts with no live replica) are placed;
- **swap** two slots on different GPUs (replica counts unchanged): up to two moves.

The excess change of a replace is exact on the slot's GPU and on every GPU holding x or y
but not both (a GPU holding both is counted as the sum of the two changes, an estimate);
the step taken is checked against the exact excess and refused when it is not lower, so
the search never cycles. Steps that add no move and lower the excess go first.
"""
from __future__ import annotations

import torch

from ..heuristics.speeds import LiveGPUs

INF = float("inf")
# Relative excess decrease (of the target) a step must bring.
GAIN_RTOL = 1e-9
# Candidates per step: experts on this many of the slowest GPUs, and this many of the
# lightest replicas, may enter a slot; swaps pair the slots of this many slowest GPUs.
HOT_GPUS = 3
LIGHT_EXPERTS = 32


def counts(e: torch.Tensor, num_experts: int) -> torch.Tensor:
    """[X, E] replicas per expert of a layout with holes (-1) e: [X, R]."""
    cnt = torch.zeros(e.shape[0], num_experts + 1, dtype=torch.int64, device=e.device)
    cnt.scatter_add_(1, e + 1, torch.ones_like(e))
    return cnt[:, 1:]


def _excess(t: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """max(0, t - target) with target [X] broadcast over t's trailing dimensions."""
    return (t - target.view(-1, *([1] * (t.dim() - 1)))).clamp_min(0)


class Layout:
    """Derived tensors of a complete layout e: [X, R] under loads w: [X, E] (float64)."""

    def __init__(self, w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs):
        X, E = w.shape
        self.e = e
        self.cnt = counts(e, E)                                                       # [X, E]
        self.per = w / self.cnt.clamp_min(1)                                          # [X, E] load per replica
        self.sw = self.per.gather(1, e)                                               # [X, R]
        self.load = gpus.loads(self.sw)                                               # [X, Q]
        self.t = self.load / gpus.speed                                               # [X, Q]
        n = torch.zeros(X, gpus.Q * E, dtype=torch.int64, device=e.device)
        n.scatter_add_(1, gpus.gpu_of * E + e, torch.ones_like(e))
        self.n = n                                                                    # [X, Q*E] copies on GPU

    def excess(self, target: torch.Tensor) -> torch.Tensor:
        return _excess(self.t, target).sum(1)                                         # [X]


def replace_gain(w: torch.Tensor, lay: Layout, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor,
                 ys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Putting expert ys[x, r, k] into slot r: (excess change [X, R, K] (inf where not
    allowed), moves added [X, R, K], the slot GPU's new time [X, R, K]). old: [X, Q*E] bool,
    the plan in force's pairs on live GPU indices."""
    X, R = lay.e.shape
    E = w.shape[1]
    K = ys.shape[2]
    Q = gpus.Q
    inv = 1 / gpus.speed                                                              # [Q]
    cnt = lay.cnt.to(w.dtype)
    # x losing a replica: its others grow (only x with >= 2 replicas may lose one)
    growth = torch.where(lay.cnt >= 2, w / (cnt - 1).clamp_min(1) - lay.per, torch.zeros_like(w))
    shrink = lay.per - w / (cnt + 1)                                                  # y gaining one
    nf = lay.n.view(X, Q, E).to(w.dtype)
    cur = _excess(lay.t, target)                                                      # [X, Q]
    tq = lay.t.unsqueeze(2)
    up = torch.where(nf > 0, _excess(tq + nf * growth.unsqueeze(1) * inv.view(1, -1, 1), target) - cur.unsqueeze(2),
                     torch.zeros_like(nf)).view(X, Q * E)                             # [X, Q*E]
    down = torch.where(nf > 0, _excess(tq - nf * shrink.unsqueeze(1) * inv.view(1, -1, 1), target) - cur.unsqueeze(2),
                       torch.zeros_like(nf)).view(X, Q * E)
    up_tot, down_tot = up.view(X, Q, E).sum(1), down.view(X, Q, E).sum(1)             # [X, E]
    g = gpus.gpu_of.view(1, R).expand(X, R)                                           # [X, R]
    x = lay.e
    gx = g * E + x
    n_gx = lay.n.gather(1, gx).to(w.dtype)                                            # [X, R]
    gy = (g.unsqueeze(2) * E + ys).reshape(X, -1)                                        # [X, R*K]
    n_gy = lay.n.gather(1, gy).view(X, R, K).to(w.dtype)
    wy, cy, shy = (t.gather(1, ys.reshape(X, -1)).view(X, R, K) for t in (w, cnt, shrink))
    dload = ((-lay.sw + (n_gx - 1) * growth.gather(1, x)).unsqueeze(2) + wy / (cy + 1) - n_gy * shy)
    slot_inv = inv[gpus.gpu_of].view(1, R, 1)
    t_g = lay.t[:, gpus.gpu_of]                                                       # [X, R]
    finish = t_g.unsqueeze(2) + dload * slot_inv
    d_g = _excess(finish, target) - cur[:, gpus.gpu_of].unsqueeze(2)
    others = ((up_tot.gather(1, x) - up.gather(1, gx)).unsqueeze(2)
              + down_tot.gather(1, ys.reshape(X, -1)).view(X, R, K) - down.gather(1, gy).view(X, R, K))
    total = d_g + others
    bad = (lay.cnt.gather(1, x) < 2).unsqueeze(2) | (x.unsqueeze(2) == ys)
    total = total.masked_fill(bad, INF)
    gained = (n_gy == 0) & ~old.gather(1, gy).view(X, R, K)
    lost = ((n_gx == 1) & ~old.gather(1, gx)).unsqueeze(2)
    return total, gained.to(torch.int64) - lost.to(torch.int64), finish


def swap_gain(lay: Layout, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor, hot: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Swapping slot ``hot[x, i]`` with any slot b: (excess change [X, H, R], moves added
    [X, H, R], ...) (exact: only the two GPUs change)."""
    X, R = lay.e.shape
    E = lay.cnt.shape[1]
    H = hot.shape[1]
    inv = 1 / gpus.speed
    ga = gpus.gpu_of[hot]                                                             # [X, H]
    gb = gpus.gpu_of.view(1, 1, R)
    cur = _excess(lay.t, target)
    d = lay.sw.unsqueeze(1) - lay.sw.gather(1, hot).unsqueeze(2)                      # [X, H, R] change on a's GPU
    ta = lay.t.gather(1, ga).unsqueeze(2)
    tb = lay.t[:, gpus.gpu_of].unsqueeze(1)
    total = (_excess(ta + d * inv[ga].unsqueeze(2), target) - cur.gather(1, ga).unsqueeze(2)
             + _excess(tb - d * inv[gpus.gpu_of].view(1, 1, R), target) - cur[:, gpus.gpu_of].unsqueeze(1))
    A = lay.e.gather(1, hot).unsqueeze(2).expand(X, H, R)
    B = lay.e.unsqueeze(1).expand(X, H, R)
    GA = ga.unsqueeze(2).expand(X, H, R)
    GB = gb.expand(X, H, R)

    def look(t, gg, ee):
        return t.gather(1, (gg * E + ee).reshape(X, -1)).view(X, H, R)

    gained = ((look(lay.n, GA, B) == 0) & ~look(old, GA, B)).long() + ((look(lay.n, GB, A) == 0) & ~look(old, GB, A)).long()
    lost = ((look(lay.n, GA, A) == 1) & ~look(old, GA, A)).long() + ((look(lay.n, GB, B) == 1) & ~look(old, GB, B)).long()
    total = total.masked_fill((GA == GB) | (A == B), INF)
    return total, gained - lost, hot


def _per_move(total: torch.Tensor, dm: torch.Tensor, floor: torch.Tensor) -> torch.Tensor:
    """Sort key of a step: excess change per move added; steps adding no move first; only
    steps lowering the excess by more than ``floor`` [X]."""
    key = torch.where(dm <= 0, total - 1e30, total / dm.clamp_min(1).to(total.dtype))
    return key.masked_fill(~(total < -floor.view(-1, *([1] * (total.dim() - 1)))), INF)


def place_orphans(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor
                  ) -> torch.Tensor:
    """Give every expert without a replica (heaviest first) the slot where the excess
    grows least (then where its GPU finishes first), evicting a replica of an expert that
    keeps another. e: [X, R] complete except for the orphans' absence."""
    X = e.shape[0]
    rows = torch.arange(X, device=e.device)
    for _ in range(w.shape[1]):
        lay = Layout(w, e, gpus)
        orphan = lay.cnt == 0
        act = orphan.any(1)
        if not bool(act.any()):
            break
        y = w.masked_fill(~orphan, -1.0).argmax(1)                                    # [X]
        total, _, finish = replace_gain(w, lay, gpus, target, old, y.view(X, 1, 1).expand(X, e.shape[1], 1))
        key = (total + finish * 1e-9).squeeze(2)
        slot = key.argmin(1)
        act = act & torch.isfinite(key.min(1).values)
        if not bool(act.any()):
            break
        e = e.clone()
        e[rows[act], slot[act]] = y[act]
    return e


def reduce_excess(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor,
                  max_steps: int = 80) -> torch.Tensor:
    """Replace and swap steps, the most excess removed per move first, until every layer
    meets its target or no step lowers its excess. e: [X, R] complete layout."""
    X, R = e.shape
    E = w.shape[1]
    rows = torch.arange(X, device=e.device)
    floor = target * GAIN_RTOL
    stuck = torch.zeros(X, dtype=torch.bool, device=e.device)
    lay = Layout(w, e, gpus)
    for _ in range(max_steps):
        exc = lay.excess(target)
        active = (exc > 0) & ~stuck
        if not bool(active.any()):
            break
        # candidates: experts on the hottest GPUs (to add a replica) and the lightest replicas
        hot_gpu = lay.t.topk(min(HOT_GPUS, gpus.Q), dim=1).indices                    # [X, h]
        hot_slots = gpus.grid[hot_gpu].flatten(1)                                     # [X, h*S]
        hot_ok = gpus.valid[hot_gpu].flatten(1)
        hot_slots = torch.where(hot_ok, hot_slots, hot_slots[:, :1])
        light = lay.per.topk(min(LIGHT_EXPERTS, E), dim=1, largest=False).indices
        ys = torch.cat([e.gather(1, hot_slots), light], 1)                           # [X, K]
        ys = ys.unsqueeze(1).expand(X, R, ys.shape[1])
        tr, dr, _ = replace_gain(w, lay, gpus, target, old, ys)
        ts, ds, _ = swap_gain(lay, gpus, target, old, hot_slots)
        kr = _per_move(tr, dr, floor).flatten(1)
        ks = _per_move(ts, ds, floor).flatten(1)
        vr, jr = kr.min(1)
        vs, js = ks.min(1)
        use_r = active & torch.isfinite(vr) & (vr <= vs)
        use_s = active & torch.isfinite(vs) & (vs < vr)
        e2 = e.clone()
        K = ys.shape[2]
        r, k = jr // K, jr % K
        e2[rows[use_r], r[use_r]] = ys[rows, r, k][use_r]
        a = hot_slots.gather(1, (js // R).unsqueeze(1)).squeeze(1)
        b = js % R
        e2[rows[use_s], a[use_s]] = e[rows[use_s], b[use_s]]
        e2[rows[use_s], b[use_s]] = e[rows[use_s], a[use_s]]
        lay2 = Layout(w, e2, gpus)
        better = (use_r | use_s) & (lay2.excess(target) < exc - floor)
        stuck |= active & ~better
        if not bool(better.any()):
            break
        e = torch.where(better.unsqueeze(1), e2, e)
        lay = Layout(w, e, gpus)
    return e


def undo_moves(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor,
               old_grid: torch.Tensor, max_steps: int = 200) -> torch.Tensor:
    """Take back moves while every layer stays within target: a slot whose (GPU, expert)
    pair is a move gets back an expert its GPU held in the plan in force (a replace that
    adds no move and removes one), the one leaving the slowest GPU fastest first.
    old_grid: [X, Q, S0] the plan in force's experts on every live GPU."""
    X, R = e.shape
    rows = torch.arange(X, device=e.device)
    done = torch.zeros(X, dtype=torch.bool, device=e.device)
    lay = Layout(w, e, gpus)
    for _ in range(max_steps):
        ok = lay.excess(target) <= 0
        active = ok & ~done
        if not bool(active.any()):
            break
        ys = old_grid[:, gpus.gpu_of, :]                                              # [X, R, S0]
        total, dm, finish = replace_gain(w, lay, gpus, target, old, ys)
        # the step whose slot GPU finishes first among those that keep the layer in target
        key = finish.masked_fill(~((total <= 0) & (dm < 0)), INF)
        v, j = key.flatten(1).min(1)
        K = ys.shape[2]
        r, k = j // K, j % K
        act = active & torch.isfinite(v)
        e2 = e.clone()
        e2[rows[act], r[act]] = ys[rows, r, k][act]
        lay2 = Layout(w, e2, gpus)
        keep = act & (lay2.excess(target) <= 0)
        done |= active & ~keep
        if not bool(keep.any()):
            break
        e = torch.where(keep.unsqueeze(1), e2, e)
        lay = Layout(w, e, gpus)
    return e
