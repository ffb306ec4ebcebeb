"""Seeded routing traces with co-activation structure (no real trace can be downloaded here).

The model behind it, and the real behaviour each part mimics:

- **Popularity.** Every layer has its own per-expert base logit (normal, ``popularity``
  spread): some experts are hot in every context, as measured loads show.
- **Topics.** ``num_topics`` topics (a domain, a language, code vs prose); in every layer
  each topic favours a set of experts by ``topic_bias`` logits. Experts of one set are
  co-activated by the same tokens (what Occult and the affinity placements exploit); the
  sets cross the expert groups, as a learned router's do. With ``communities`` > 0 the
  experts of every layer form that many communities (a random partition, independent of
  the groups: experts that specialise in the same domains) and a topic favours
  ``topic_communities`` of them plus ``topic_experts`` random other experts; with
  ``communities = 0`` a topic favours ``topic_experts`` random experts (weaker structure:
  the sets of different topics overlap at random).
- **Requests and drift.** Tokens come in requests (``request_tokens`` long on average,
  geometric), each of one topic and from one source rank; the topic mix follows a random
  walk in logit space (``drift`` per request), so the traffic pattern moves over time.
- **Routing.** Per token and layer the router scores are the logits plus Gumbel noise, so
  top-k of them is a draw without replacement from the softmax; with ``group_limit`` the
  token first keeps its best groups (DeepSeek-V3: 4 of 8, group score = sum of its two best
  experts), as group-limited routing does.

Everything is drawn from one numpy PCG64 stream (``seed``): a trace regenerates bit for bit.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from ..cluster import MAX_REPLICAS, MODELS, ModelPreset, get_model
from ..errors import OptionError
from ..memory import rows_per_chunk
from .trace import RoutingTrace


# Hard bounds on the integer parameters; below them the working-memory budget decides
# (:func:`generation_bytes`): a trace of T tokens x L layers x top-k is 2 T L k bytes and more.
MAX_TOKENS = 1 << 22
MAX_TOPICS = 1 << 16


@dataclass(frozen=True)
class RoutingSpec:
    """The generator's parameters (defaults: the shipped dataset's)."""

    num_tokens: int = 3072
    num_topics: int = 16
    communities: int = 8            # expert communities per layer (0: topics favour random sets)
    topic_communities: int = 1      # communities a topic favours
    topic_experts: int = 0          # random experts a topic favours besides; 0 = num_experts // 8 without
                                    # communities, none with them
    topic_bias: float = 4.0         # logits added to the experts a topic favours
    popularity: float = 0.6         # std of the per-expert base logits
    request_tokens: int = 16        # mean tokens per request in the trace (one topic, one source rank)
    drift: float = 0.1              # std of the topic-mix random walk per request
    group_limit: int = -1           # groups a token may use; -1 = the model's (4 for DeepSeek-V3), 0 = none
    num_ranks: int = 0              # source ranks; 0 = the GPUs of the model's default cluster

    def check(self) -> "RoutingSpec":
        least = {"num_tokens": 1, "num_topics": 1, "request_tokens": 1, "topic_experts": 0, "num_ranks": 0,
                 "communities": 0, "topic_communities": 0, "group_limit": -1}
        for name, low in least.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise OptionError(name, f"must be an integer >= {low}, got {v!r}")
        for name, high in (("num_tokens", MAX_TOKENS), ("num_topics", MAX_TOPICS), ("request_tokens", MAX_TOKENS),
                           ("num_ranks", MAX_REPLICAS), ("topic_experts", MAX_REPLICAS), ("communities", MAX_REPLICAS),
                           ("topic_communities", MAX_REPLICAS)):
            if getattr(self, name) > high:
                raise OptionError(name, f"must be <= {high}, got {getattr(self, name)}")
        for name in ("topic_bias", "popularity", "drift"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 100:
                raise OptionError(name, f"must be a number in [0, 100], got {v!r}")
        return self


def _gumbel(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    u = rng.random(shape, dtype=np.float32)
    return -np.log(-np.log(np.clip(u, 1e-12, 1.0 - 1e-7)))


def generate_routing(model: str | ModelPreset = "deepseek-v3", seed: int = 0, spec: RoutingSpec | None = None,
                     **overrides) -> RoutingTrace:
    """A seeded :class:`RoutingTrace` for the model preset ``model`` (a name of :data:`MODELS`,
    or a :class:`ModelPreset` for another shape, e.g. a small instance for the exact bound).

    ``spec`` (or keyword overrides of :class:`RoutingSpec`'s fields) sets the parameters.
    """
    preset = model if isinstance(model, ModelPreset) else get_model(model)
    model = model if isinstance(model, str) else preset.name
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise OptionError("seed", f"must be an integer >= 0, got {seed!r}")
    unknown = set(overrides) - set(RoutingSpec.__dataclass_fields__)
    if unknown:
        raise OptionError(sorted(unknown)[0], f"is not a generator parameter; known: "
                          f"{', '.join(RoutingSpec.__dataclass_fields__)}")
    spec = RoutingSpec(**{**asdict(spec or RoutingSpec()), **overrides}).check()
    L, E, G, k = preset.num_layers, preset.num_experts, preset.num_groups, preset.top_k
    T, C = spec.num_tokens, spec.num_topics
    m = spec.topic_experts or (0 if spec.communities else max(k, E // 8))
    if m > E:
        raise OptionError("topic_experts", f"must be <= the number of experts ({E}), got {m}")
    if spec.communities > E or spec.topic_communities > max(spec.communities, 1) or \
            (spec.communities and not spec.topic_communities):
        raise OptionError("communities", f"need 1 <= topic_communities <= communities <= experts ({E}), got "
                          f"{spec.topic_communities} of {spec.communities}")
    limit = spec.group_limit if spec.group_limit >= 0 else (4 if G > 4 else 0)
    if limit > G:
        raise OptionError("group_limit", f"must be <= the number of groups ({G}), got {limit}")
    if limit and limit * (E // G) < k:
        raise OptionError("group_limit", f"{limit} groups of {E // G} experts cannot hold top-{k}")
    ranks = spec.num_ranks or preset.default_cluster().num_gpus
    # Sized before anything is drawn: the trace itself (its ids, and the copies saving makes),
    # the per-topic tables [L, C, E] and the request walk [requests, C]; the per-layer scores
    # go in blocks of tokens that fit what is left.
    id_bytes = 2 if E <= 1 << 15 else 4
    n_req_max = T // spec.request_tokens * 4 + 16
    fixed = 2 * L * T * k * id_bytes + 29 * L * C * E + 4 * 8 * n_req_max * C + 16 * T
    what = f"a routing trace of {T} tokens x {L} layers x top-{k} with {C} topics"
    param = "num_topics" if 29 * L * C * E + 32 * n_req_max * C > 2 * L * T * k * id_bytes else "num_tokens"
    hint = "use fewer topics" if param == "num_topics" else "use fewer tokens (--tokens)"
    block = rows_per_chunk(28 * E, T, param, what, hint, fixed_bytes=fixed)
    rng = np.random.default_rng(seed)

    base = (spec.popularity * rng.standard_normal((L, E))).astype(np.float32)          # [L, E]
    favour = np.zeros((L, C, E), dtype=np.float32)
    if m:
        members = np.argsort(rng.random((L, C, E)), axis=-1)[..., :m]                   # [L, C, m]
        np.put_along_axis(favour, members, np.float32(spec.topic_bias), axis=-1)
    if spec.communities:
        # community of every expert (a random balanced partition per layer), and the
        # communities each topic favours
        community = np.argsort(rng.random((L, E)), axis=-1) % spec.communities          # [L, E]
        chosen = np.argsort(rng.random((L, C, spec.communities)), axis=-1)[..., :spec.topic_communities]
        liked = (community[:, None, :, None] == chosen[:, :, None, :]).any(-1)          # [L, C, E]
        favour = np.where(liked, np.float32(spec.topic_bias), favour)

    # Requests: geometric lengths, each with one topic from the drifting mix and one rank.
    lengths = rng.geometric(1.0 / spec.request_tokens, size=T // spec.request_tokens * 4 + 16)
    while lengths.sum() < T:
        lengths = np.concatenate([lengths, rng.geometric(1.0 / spec.request_tokens, size=lengths.size)])
    n_req = int(np.searchsorted(np.cumsum(lengths), T) + 1)
    lengths = lengths[:n_req]
    walk = np.cumsum(spec.drift * rng.standard_normal((n_req, C)), axis=0)              # [requests, C]
    mix = np.exp(walk - walk.max(1, keepdims=True))
    cdf = np.cumsum(mix / mix.sum(1, keepdims=True), axis=1)
    topic_of_req = np.minimum((cdf < rng.random((n_req, 1))).sum(1), C - 1)
    rank_of_req = rng.integers(0, ranks, size=n_req)
    topic = np.repeat(topic_of_req, lengths)[:T]                                        # [T]
    source = np.repeat(rank_of_req, lengths)[:T].astype(np.int32)

    ids = torch.empty(L, T, k, dtype=torch.int16 if E <= 1 << 15 else torch.int32)
    for layer in range(L):                     # one [block, E] score matrix at a time (memory)
        # Blocks of tokens draw the same Gumbel stream as one [T, E] draw (numpy fills in order).
        for t0 in range(0, T, block):
            t1 = min(T, t0 + block)
            n = t1 - t0
            scores = base[layer][None, :] + favour[layer][topic[t0:t1]] + _gumbel(rng, (n, E))   # [n, E]
            s = torch.from_numpy(scores)
            if limit:
                grouped = s.view(n, G, E // G)
                group_score = grouped.topk(min(2, E // G), dim=-1).values.sum(-1)         # [n, G]
                keep = group_score.topk(limit, dim=-1).indices
                mask = torch.ones(n, G, dtype=torch.bool).scatter_(1, keep, False)
                s = grouped.masked_fill(mask.unsqueeze(-1), float("-inf")).view(n, E)
            # A token's experts as a set, ascending: the order of a top-k carries no meaning for
            # placement or traffic, and sorted rows compress better (the shipped file stays small).
            ids[layer, t0:t1] = s.topk(k, dim=-1).indices.sort(-1).values.to(ids.dtype)
    meta = {"model": model, "model_name": preset.name, "generator": "routing", "seed": seed,
            "num_groups": G, "top_k": k, "group_limit": limit, **asdict(spec)}
    return RoutingTrace(ids, E, torch.from_numpy(source), ranks, meta)


__all__ = ["RoutingSpec", "generate_routing", "MODELS"]
