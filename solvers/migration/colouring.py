"""Bipartite edge colouring with as many colours as the largest degree (König's theorem).

A transfer round is a matching between senders and receivers: every GPU sends at most one
copy and receives at most one. With copies of one duration and fixed sources, the fewest
rounds is the colouring number of the bipartite multigraph (senders, receivers, one edge
per copy), which König's theorem puts at its largest degree. The colouring below reaches
it in O(edges x vertices): each edge takes a colour free at both ends, after swapping two
colours along an alternating path when needed (a Kempe chain; in a bipartite graph the
chain never returns to the edge's other end, so the swap is always safe).
"""
from __future__ import annotations

import numpy as np


def max_degree(src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int) -> int:
    """The largest degree of the bipartite multigraph with edges ``src[i] -> dst[i]``."""
    if len(src) == 0:
        return 0
    return int(max(np.bincount(src, minlength=num_src).max(), np.bincount(dst, minlength=num_dst).max()))


def colour_edges(src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int) -> tuple[np.ndarray, int]:
    """A proper edge colouring of the bipartite multigraph ``src[i] -> dst[i]`` ([M] int
    arrays, sender ids < num_src, receiver ids < num_dst) with exactly ``max_degree``
    colours. Returns (colour [M] int64 in 0..D-1, D)."""
    M = len(src)
    D = max_degree(src, dst, num_src, num_dst)
    colour = np.full(M, -1, dtype=np.int64)
    if M == 0:
        return colour, 0
    V = num_src + num_dst
    # at[v][c]: the edge of colour c at vertex v (-1: c is free at v); vertices: senders, then receivers
    at = [[-1] * D for _ in range(V)]
    ends = [(int(s), num_src + int(d)) for s, d in zip(src.tolist(), dst.tolist())]
    for i, (u, v) in enumerate(ends):
        au, av = at[u], at[v]
        a = au.index(-1)                   # free at u
        if av[a] != -1:                    # a is taken at v: take a colour b free at v
            b = av.index(-1)
            if au[b] == -1:
                a = b
            else:                          # swap a and b along the a/b chain that starts at v
                path = []
                x, c = v, a
                while True:
                    e = at[x][c]
                    if e == -1:
                        break
                    path.append(e)
                    p, q = ends[e]
                    x = q if p == x else p
                    c = b if c == a else a
                for e in path:             # clear first, then set: chain edges share vertices
                    p, q = ends[e]
                    at[p][colour[e]] = -1
                    at[q][colour[e]] = -1
                for e in path:
                    colour[e] = b if colour[e] == a else a
                    p, q = ends[e]
                    at[p][colour[e]] = e
                    at[q][colour[e]] = e
        colour[i] = a
        au[a] = i
        av[a] = i
    return colour, D
