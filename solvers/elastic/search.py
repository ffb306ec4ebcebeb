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
from scipy.optimize import linear_sum_assignment

from ..heuristics.common import LiveGPUs

INF = float("inf")
# Relative excess decrease (of the target) a step must bring.
GAIN_RTOL = 1e-9
# Candidates per step: experts on this many of the slowest GPUs, and this many of the
# lightest replicas, may enter a slot; swaps pair the slots of this many slowest GPUs.
HOT_GPUS = 3
LIGHT_EXPERTS = 32
# Slots a replace may take per step: the lightest replicas of experts with another one.
SPARE_SLOTS = 64
# Weight of the excess against the spread in spread_penalty.
EXCESS_WEIGHT = 10.0


def counts(e: torch.Tensor, num_experts: int) -> torch.Tensor:
    """[X, E] replicas per expert of a layout with holes (-1) e: [X, R]."""
    cnt = torch.zeros(e.shape[0], num_experts + 1, dtype=torch.int64, device=e.device)
    cnt.scatter_add_(1, e + 1, torch.ones_like(e))
    return cnt[:, 1:]


def swapped(p2l: torch.Tensor, slot_a: torch.Tensor, slot_b: torch.Tensor) -> torch.Tensor:
    """p2l [X, R] with the experts of slots slot_a [X] and slot_b [X] swapped in every row."""
    a, b = p2l.gather(1, slot_a.unsqueeze(1)), p2l.gather(1, slot_b.unsqueeze(1))
    return p2l.clone().scatter_(1, slot_a.unsqueeze(1), b).scatter_(1, slot_b.unsqueeze(1), a)


def _excess(t: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """max(0, t - target) with target [X] broadcast over t's trailing dimensions."""
    return (t - target.view(-1, *([1] * (t.dim() - 1)))).clamp_min(0)


def spread_penalty(ideal: torch.Tensor):
    """A penalty that also counts the spread around ``ideal`` [X] (the average time): the
    excess over the target first (x EXCESS_WEIGHT), then ``(t - ideal)^2 / ideal``, so that a
    placement that lifts a GPU left below the average is preferred (the lost GPUs' load must
    end up on nearly every survivor, and each GPU lifted without a move saves one later)."""
    def penalty(t: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        r = ideal.view(-1, *([1] * (t.dim() - 1)))
        return _excess(t, target) * EXCESS_WEIGHT + (t - r).square() / r
    return penalty


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
                 ys: torch.Tensor, rs: torch.Tensor, penalty=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Putting expert ys[x, k] into slot rs[x, i]: (excess change [X, M, K] (inf where not
    allowed), moves added [X, M, K], the slot GPU's new time [X, M, K]). old: [X, Q*E]
    bool, the plan in force's pairs on live GPU indices. penalty(t, target): the per-GPU
    cost summed (default: the excess over the target). Only the experts of the slots and
    the candidates are evaluated on every GPU ([X, Q, M] and [X, Q, K] tables)."""
    cost = penalty or _excess
    X, M = rs.shape
    E = w.shape[1]
    K = ys.shape[1]
    Q = gpus.Q
    inv = (1 / gpus.speed).view(1, Q, 1)
    cnt = lay.cnt.to(w.dtype)
    n3 = lay.n.view(X, Q, E)
    cur = cost(lay.t, target)                                                      # [X, Q]
    tq = lay.t.unsqueeze(2)
    g = gpus.gpu_of[rs]                                                               # [X, M] slot GPUs
    x = lay.e.gather(1, rs)                                                           # [X, M] their experts
    # x losing a replica: its others grow (only x with >= 2 replicas may lose one)
    cx, wx = lay.cnt.gather(1, x), w.gather(1, x)
    growth = torch.where(cx >= 2, wx / (cx - 1).clamp_min(1) - wx / cx.clamp_min(1), torch.zeros_like(wx))
    nx = n3.gather(2, x.unsqueeze(1).expand(X, Q, M)).to(w.dtype)                    # [X, Q, M]
    up = torch.where(nx > 0, cost(tq + nx * growth.unsqueeze(1) * inv, target) - cur.unsqueeze(2),
                     torch.zeros_like(nx))
    up_g = up.gather(1, g.unsqueeze(1)).squeeze(1)                                    # [X, M] at the slot GPU
    # y gaining one: its replicas on every GPU shrink
    cy, wy = cnt.gather(1, ys), w.gather(1, ys)                                       # [X, K]
    shy = wy / cy.clamp_min(1) - wy / (cy + 1)
    ny = n3.gather(2, ys.unsqueeze(1).expand(X, Q, K)).to(w.dtype)                   # [X, Q, K]
    down = torch.where(ny > 0, cost(tq - ny * shy.unsqueeze(1) * inv, target) - cur.unsqueeze(2),
                       torch.zeros_like(ny))
    down_g = down.gather(1, g.unsqueeze(2).expand(X, M, K))                           # [X, M, K]
    n_gx = lay.n.gather(1, g * E + x).to(w.dtype)                                     # [X, M]
    n_gy = ny.gather(1, g.unsqueeze(2).expand(X, M, K))                               # [X, M, K]
    dload = ((-lay.sw.gather(1, rs) + (n_gx - 1) * growth).unsqueeze(2)
             + (wy / (cy + 1)).unsqueeze(1) - n_gy * shy.unsqueeze(1))
    finish = lay.t.gather(1, g).unsqueeze(2) + dload * (1 / gpus.speed)[g].unsqueeze(2)
    d_g = cost(finish, target) - cur.gather(1, g).unsqueeze(2)
    total = d_g + (up.sum(1) - up_g).unsqueeze(2) + down.sum(1).unsqueeze(1) - down_g
    bad = (cx < 2).unsqueeze(2) | (x.unsqueeze(2) == ys.unsqueeze(1))
    total = total.masked_fill(bad, INF)
    old3 = old.view(X, Q, E)
    old_gy = old3.gather(2, ys.unsqueeze(1).expand(X, Q, K)).gather(1, g.unsqueeze(2).expand(X, M, K))
    gained = (n_gy == 0) & ~old_gy
    lost = ((n_gx == 1) & ~old.gather(1, g * E + x)).unsqueeze(2)
    return total, gained.to(torch.int64) - lost.to(torch.int64), finish


def spare_slots(lay: Layout, limit: int) -> torch.Tensor:
    """[X, M] up to ``limit`` slots whose expert has another replica (the slots a replace may
    take), lightest replica first; rows with fewer repeat their first (the gains mask them)."""
    key = lay.sw.masked_fill(lay.cnt.gather(1, lay.e) < 2, INF)
    m = min(limit, key.shape[1])
    return key.topk(m, dim=1, largest=False).indices


def swap_gain(lay: Layout, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor, hot: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Swapping slot ``hot[x, i]`` with any slot b: (excess change [X, H, R], moves added
    [X, H, R], ...) (exact: only the two GPUs change)."""
    R = lay.e.shape[1]
    inv = 1 / gpus.speed
    ga = gpus.gpu_of[hot]                                                             # [X, H]
    gb = gpus.gpu_of.view(1, 1, R)
    cur = _excess(lay.t, target)
    d = lay.sw.unsqueeze(1) - lay.sw.gather(1, hot).unsqueeze(2)                      # [X, H, R] change on a's GPU
    ta = lay.t.gather(1, ga).unsqueeze(2)
    tb = lay.t[:, gpus.gpu_of].unsqueeze(1)
    total = (_excess(ta + d * inv[ga].unsqueeze(2), target) - cur.gather(1, ga).unsqueeze(2)
             + _excess(tb - d * inv[gpus.gpu_of].view(1, 1, R), target) - cur[:, gpus.gpu_of].unsqueeze(1))
    A = lay.e.gather(1, hot)                                                          # [X, H]
    total = total.masked_fill((ga.unsqueeze(2) == gb) | (A.unsqueeze(2) == lay.e.unsqueeze(1)), INF)
    return total, swap_moves(lay.n, lay.e, gpus, old, hot), hot


def swap_moves(n: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, old: torch.Tensor, hot: torch.Tensor
               ) -> torch.Tensor:
    """[X, H, R] moves added by swapping slot ``hot[x, i]`` with slot b of e: [X, R] (n: [X, Q*E]
    copies on every live GPU, old: [X, Q*E] the plan in force's pairs): a GPU gaining an expert
    it neither holds nor held is a move; losing its only copy of a pair that was a move undoes
    one (meaningless where the two slots share a GPU or an expert: callers exclude those)."""
    X, R = e.shape
    H = hot.shape[1]
    Q = gpus.Q
    E = n.shape[1] // Q
    ga = gpus.gpu_of[hot]                                                             # [X, H]
    A = e.gather(1, hot)                                                              # [X, H]
    n3, o3 = n.view(X, Q, E), old.view(X, Q, E)
    free = (n3 == 0) & ~o3                  # [X, Q, E] a GPU getting the expert: a move
    sole = ((n3 == 1) & ~o3).view(X, -1)    # its only copy leaving: a move undone
    gained = (free.gather(1, ga.unsqueeze(2).expand(X, H, E)).gather(2, e.unsqueeze(1).expand(X, H, R)).long()
              + free.gather(2, A.unsqueeze(1).expand(X, Q, H))
              .gather(1, gpus.gpu_of.view(1, R, 1).expand(X, R, H)).transpose(1, 2).long())
    lost = (sole.gather(1, ga * E + A).unsqueeze(2).long()
            + sole.gather(1, gpus.gpu_of.view(1, R) * E + e).unsqueeze(1).long())
    return gained - lost


def _per_move(total: torch.Tensor, dm: torch.Tensor, floor: torch.Tensor) -> torch.Tensor:
    """Sort key of a step: excess change per move added; steps adding no move first; only
    steps lowering the excess by more than ``floor`` [X]."""
    key = torch.where(dm <= 0, total - 1e30, total / dm.clamp_min(1).to(total.dtype))
    return key.masked_fill(~(total < -floor.view(-1, *([1] * (total.dim() - 1)))), INF)


def place_orphans(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor,
                  penalty=None) -> torch.Tensor:
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
        rs = spare_slots(lay, SPARE_SLOTS)
        total, _, finish = replace_gain(w, lay, gpus, target, old, y.view(X, 1), rs, penalty)
        key = (total + finish * 1e-9).squeeze(2)
        slot = rs.gather(1, key.argmin(1, keepdim=True)).squeeze(1)
        act = act & torch.isfinite(key.min(1).values)
        if not bool(act.any()):
            break
        e = e.clone()
        e[rows[act], slot[act]] = y[act]
    return e


def _step(w: torch.Tensor, e: torch.Tensor, lay: Layout, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor,
          floor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best step of every row: (layout after it [X, R], taken [X] bool, layout after the
    best swap [X, R], that swap exists [X] bool); the swap is the fallback when the best
    step was a replace whose estimate was wrong (swap gains are exact)."""
    X, R = e.shape
    E = w.shape[1]
    rows = torch.arange(X, device=e.device)
    # candidates: experts on the hottest GPUs (to add a replica) and the lightest replicas
    hot_gpu = lay.t.topk(min(HOT_GPUS, gpus.Q), dim=1).indices                        # [X, h]
    hot_slots = gpus.grid[hot_gpu].flatten(1)                                         # [X, h*S]
    hot_slots = torch.where(gpus.valid[hot_gpu].flatten(1), hot_slots, hot_slots[:, :1])
    light = lay.per.topk(min(LIGHT_EXPERTS, E), dim=1, largest=False).indices
    ys = torch.cat([e.gather(1, hot_slots), light], 1)                               # [X, K]
    K = ys.shape[1]
    rs = spare_slots(lay, SPARE_SLOTS)
    tr, dr, _ = replace_gain(w, lay, gpus, target, old, ys, rs)
    ts, ds, _ = swap_gain(lay, gpus, target, old, hot_slots)
    vr, jr = _per_move(tr, dr, floor).flatten(1).min(1)
    vs, js = _per_move(ts, ds, floor).flatten(1).min(1)
    swap_ok = torch.isfinite(vs)
    after_swap = swapped(e, hot_slots.gather(1, (js // R).unsqueeze(1)).squeeze(1), js % R)
    use_r = torch.isfinite(vr) & (vr <= vs)
    replaced = e.clone()
    i, k = jr // K, jr % K
    replaced[rows, rs[rows, i]] = ys[rows, k]
    best = torch.where(use_r.unsqueeze(1), replaced, after_swap)
    return best, use_r | swap_ok, after_swap, swap_ok


def reduce_excess(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor,
                  max_steps: int = 80) -> torch.Tensor:
    """Replace and swap steps, the most excess removed per move first, until every layer
    meets its target or no step lowers its excess. e: [X, R] complete layout. Each step
    works on the layers still above target only."""
    floor = target * GAIN_RTOL
    stuck = torch.zeros(e.shape[0], dtype=torch.bool, device=e.device)
    for _ in range(max_steps):
        exc_all = Layout(w, e, gpus).excess(target)
        idx = ((exc_all > 0) & ~stuck).nonzero().squeeze(1)
        if idx.numel() == 0:
            break
        ws, es, ts, olds, fl, exc = w[idx], e[idx], target[idx], old[idx], floor[idx], exc_all[idx]
        best, ok, by_swap, swap_ok = _step(ws, es, Layout(ws, es, gpus), gpus, ts, olds, fl)
        better = ok & (Layout(ws, best, gpus).excess(ts) < exc - fl)
        # a replace whose estimate was wrong: the best swap instead (its gain is exact)
        retry = ~better & swap_ok
        better_swap = retry & (Layout(ws, by_swap, gpus).excess(ts) < exc - fl)
        new = torch.where(better.unsqueeze(1), best, torch.where(better_swap.unsqueeze(1), by_swap, es))
        stuck[idx] |= ~(better | better_swap)
        e = e.clone()
        e[idx] = new
    return e


def _moves_of(lay: Layout, gpus: LiveGPUs, old: torch.Tensor) -> torch.Tensor:
    """[X] moves of a layout: (live GPU, expert) pairs held now and not in the plan in force."""
    return ((lay.n > 0) & ~old).sum(1)


def _fewer_within(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor,
                  moves: torch.Tensor) -> torch.Tensor:
    """[X] the layout e: [X, R] is within target, keeps every expert and has fewer moves
    than ``moves`` [X] (the exact check of a shed step)."""
    lay = Layout(w, e, gpus)
    return (lay.excess(target) <= 0) & (_moves_of(lay, gpus, old) < moves) & (lay.cnt >= 1).all(1)


def shed_moves(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor,
               max_steps: int = 60) -> torch.Tensor:
    """Undo moves the layout no longer needs: on layers within target, while some step
    removes a move and keeps every GPU within target, take it (the one removing most moves,
    then the lowest new time on the GPUs it touches). The steps: a slot holding the only
    copy of a pair that was a move either becomes an expert its GPU holds or held (a
    replace: its expert must keep another replica) or swaps with any slot elsewhere.

    The excess search adds moves greedily until the target is met; a move taken early can
    become unneeded once later ones relieved the same GPUs, and then the slack left under
    the target pays for undoing it. Every step is checked exactly (no move added, no GPU
    above target), so the moves never rise. e: [X, R] complete layout; old: [X, Q*E]."""
    X, R = e.shape
    E = w.shape[1]
    tol = target * 1e-12          # slack for the replace estimate; acceptance is exact (excess 0)
    ys_all = torch.arange(E, device=e.device).repeat(X, 1)                           # [X, E] every expert
    done = torch.zeros(X, dtype=torch.bool, device=e.device)
    for _ in range(max_steps):
        lay = Layout(w, e, gpus)
        idx = ((lay.excess(target) <= 0) & ~done).nonzero().squeeze(1)
        if idx.numel() == 0:
            break
        ws, es, ts, olds, tl = w[idx], e[idx], target[idx], old[idx], tol[idx]
        ls = Layout(ws, es, gpus)
        x_n = idx.numel()
        # slots holding the only copy of a pair that was a move: [x, M]
        pair = gpus.gpu_of.view(1, R) * E + es
        sole_new = (ls.n.gather(1, pair) == 1) & ~olds.gather(1, pair)
        m = int(sole_new.sum(1).max())
        if m == 0:
            done[idx] = True
            continue
        rs = sole_new.to(torch.int64).topk(m, dim=1).indices                          # [x, m]
        valid = sole_new.gather(1, rs)
        tr, dr, finish = replace_gain(ws, ls, gpus, ts, olds, ys_all[:x_n], rs)
        ok_r = valid.unsqueeze(2) & (dr < 0) & (tr <= tl.view(-1, 1, 1))
        key_r = torch.where(ok_r, dr.to(w.dtype) * 1e6 + finish / ts.view(-1, 1, 1), torch.full_like(tr, INF))
        tsw, dsw, _ = swap_gain(ls, gpus, ts, olds, rs)
        t_after = torch.maximum(ls.t.gather(1, gpus.gpu_of[rs]).unsqueeze(2), ls.t[:, gpus.gpu_of].unsqueeze(1))
        ok_s = valid.unsqueeze(2) & (dsw < 0) & (tsw <= tl.view(-1, 1, 1))
        key_s = torch.where(ok_s, dsw.to(w.dtype) * 1e6 + t_after / ts.view(-1, 1, 1), torch.full_like(tsw, INF))
        vr, jr = key_r.flatten(1).min(1)
        vs, js = key_s.flatten(1).min(1)
        r_rows = torch.arange(x_n, device=e.device)
        replaced = es.clone()
        replaced[r_rows, rs[r_rows, jr // E]] = jr % E                                  # ys_all[:, k] = k
        by_swap = swapped(es, rs.gather(1, (js // R).unsqueeze(1)).squeeze(1), js % R)
        moves0 = _moves_of(ls, gpus, olds)
        use_r = (_fewer_within(ws, replaced, gpus, ts, olds, moves0) & torch.isfinite(vr)
                 & (~torch.isfinite(vs) | (vr <= vs)))
        use_s = ~use_r & _fewer_within(ws, by_swap, gpus, ts, olds, moves0) & torch.isfinite(vs)
        # a replace whose estimate failed: the swap if it is good
        new = torch.where(use_r.unsqueeze(1), replaced, torch.where(use_s.unsqueeze(1), by_swap, es))
        done[idx[~(use_r | use_s)]] = True
        e = e.clone()
        e[idx] = new
    return e


def match_orphans(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, target: torch.Tensor, old: torch.Tensor,
                  penalty=None) -> torch.Tensor:
    """Place the orphans jointly: a min-cost assignment of orphans to live GPUs, at most one
    orphan per GPU, the cost of (orphan y, GPU g) being the least penalty growth of putting
    y into one of g's spare slots (``replace_gain`` on the layout before any is placed).
    The greedy ``place_orphans`` puts the heaviest orphan first where it hurts least, which
    can leave a later orphan only bad slots; the assignment weighs them all together.
    Costs are each judged alone (two placements interact only through an expert holding
    slots on both GPUs), so an assignment that would evict an expert's last replicas is
    undone for those slots, and ``place_orphans`` places whatever is left. One small
    assignment per layer (scipy); e: [X, R] complete except for the orphans."""
    X = e.shape[0]
    lay = Layout(w, e, gpus)
    orphan = lay.cnt == 0                                                             # [X, E]
    K = int(orphan.sum(1).max())
    if K == 0:
        return e
    ys = w.masked_fill(~orphan, -1.0).topk(K, dim=1).indices                          # [X, K] heaviest first
    is_orphan = orphan.gather(1, ys)
    rs = spare_slots(lay, SPARE_SLOTS)                                                # [X, M]
    total, _, finish = replace_gain(w, lay, gpus, target, old, ys, rs, penalty)
    key = total + finish * 1e-9                                                       # [X, M, K]
    key = key.masked_fill(~is_orphan.unsqueeze(1), INF)
    # per GPU the best of its spare slots for every orphan: [X, Q, K]
    g = gpus.gpu_of[rs]                                                               # [X, M]
    best = torch.full((X, gpus.Q, K), INF, dtype=w.dtype, device=e.device)
    best.scatter_reduce_(1, g.unsqueeze(2).expand_as(key), key, "amin")
    # the slot achieving it: among the slots of that GPU, the one with that key
    hit = (key == best.gather(1, g.unsqueeze(2).expand_as(key))) & torch.isfinite(key)
    slot_of = torch.full((X, gpus.Q, K), -1, dtype=torch.int64, device=e.device)
    slot_of.scatter_reduce_(1, g.unsqueeze(2).expand_as(key),
                            torch.where(hit, rs.unsqueeze(2).expand_as(key),
                                        torch.full_like(key, -1, dtype=torch.int64)),
                            "amax")
    cost = best.transpose(1, 2).cpu().numpy()                                         # [X, K, Q]
    out = e.clone()
    for x in range(X):                      # one small assignment per layer (orphans x GPUs)
        ok = is_orphan[x].cpu().numpy()
        c = cost[x][ok]
        finite = c[c < INF]
        if c.size == 0 or finite.size == 0:
            continue
        c = c.copy()
        c[~(c < INF)] = finite.max() * 10 + 1e12
        ks, qs = linear_sum_assignment(c)
        kidx = ok.nonzero()[0][ks]
        for k, q in zip(kidx.tolist(), qs.tolist()):
            r = int(slot_of[x, q, k])
            if r >= 0 and bool(torch.isfinite(best[x, q, k])):
                out[x, r] = ys[x, k]
    # undo the slots whose evicted expert lost its last replica
    changed = out != e
    lost = (counts(out, w.shape[1]) == 0) & ~orphan                                   # [X, E]
    undo = changed & lost.gather(1, e)
    out = torch.where(undo, e, out)
    return place_orphans(w, out, gpus, target, old, penalty)
