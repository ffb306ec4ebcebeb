"""``eplb microbatch``: a plan's per-micro-batch imbalance under the even and scheduled split.

    eplb microbatch --loads TRACE --plan plan.json
                    [--tokens-per-microbatch 4096 --top-k 8 --microbatches 64 --seed 0
                     | --steps-as-microbatches] [--json] [--out DIR]

With ``--out`` it writes ``summary.json``, ``imbalance.csv`` (one row per micro-batch and
layer) and ``histogram.svg`` (both dispatch models overlaid) to DIR.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from ..dispatch.microbatches import imbalance_stats, microbatch_imbalance, sample_microbatches, steps_as_microbatches
from ..errors import OptionError
from ..io import read_loads
from ..cluster import Cluster
from ..cluster_text import gpu_ids
from ..planfile import recorded_cluster
from ..workloads.exporters import live_map, read_plan_for_loads
from ..safewrite import write_text_atomic
from .inputs import dropped_note


def cmd_microbatch(args: argparse.Namespace) -> int:
    sampling = (args.tokens_per_microbatch, args.top_k, args.microbatches)
    if args.steps_as_microbatches and any(v is not None for v in sampling):
        raise OptionError("steps_as_microbatches", "takes the trace's steps as they are: do not pass "
                          "--tokens-per-microbatch, --top-k or --microbatches with it")
    info = read_loads(args.loads)                   # MoE layers: leading all-zero layers dropped
    trace = info.trace if info.trace is not None else info.weights.unsqueeze(0)
    # every plan format `eplb score` reads: an eplb file records its cluster (uneven slots,
    # failed GPUs, speeds); an engine map records no GPU count and takes --gpus
    plan, shape, _, _ = read_plan_for_loads(args.plan, info.num_layers, info.num_experts)
    plan, cluster = _plan_cluster(args, plan, shape)
    L, E = plan.num_layers, plan.logcnt.shape[-1]
    if trace.dim() != 3 or tuple(trace.shape[1:]) != (L, E):
        raise OptionError("loads", f"{args.loads} has shape {tuple(trace.shape)} but the plan is for "
                          f"[steps, {L}, {E}]")
    if args.steps_as_microbatches:
        tokens = steps_as_microbatches(trace)
        source = {"microbatches": "steps", "count": int(tokens.shape[0])}
    else:
        # "or" would turn an explicit 0 into the default: only absent flags take it
        k, n, b = (8 if args.top_k is None else args.top_k,
                   4096 if args.tokens_per_microbatch is None else args.tokens_per_microbatch,
                   64 if args.microbatches is None else args.microbatches)
        tokens = sample_microbatches(trace, b, n, k, args.seed)
        source = {"microbatches": "sampled", "count": b, "tokens_per_microbatch": n, "top_k": k,
                  "seed": args.seed}
    imbalance = {split: microbatch_imbalance(plan, tokens, cluster, split) for split in ("even", "scheduled")}
    summary = {"plan": str(args.plan), "loads": str(args.loads), **source, "layers": L,
               "gpus": cluster.num_gpus, "live_gpus": len(cluster.live_gpus), "replicas": cluster.num_replicas,
               "imbalance": {split: imbalance_stats(v) for split, v in imbalance.items()}}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
        write_csv(out / "imbalance.csv", imbalance)
        write_text_atomic(out / "histogram.svg", histogram_svg(imbalance))
        summary["written"] = [str(out / n) for n in ("summary.json", "imbalance.csv", "histogram.svg")]
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"plan {args.plan} on {source['count']} micro-batches ({source['microbatches']}) x "
              f"{L} layers{dropped_note(info)} on {cluster.describe()}: max / mean GPU load (tokens, over the live "
              "GPUs) per micro-batch and layer")
        print(f"{'split':<10} {'mean':>8} {'p50':>8} {'p99':>8} {'worst':>8}")
        for split, s in summary["imbalance"].items():
            print(f"{split:<10} {s['mean']:8.4f} {s['p50']:8.4f} {s['p99']:8.4f} {s['worst']:8.4f}")
        for path in summary.get("written", []):
            print(f"wrote {path}")
    return 0


def _plan_cluster(args: argparse.Namespace, plan, shape: dict | None):
    """(plan, the cluster it was made for): recorded in an eplb plan file (slot counts, failed
    GPUs and speeds included); for an engine map, --gpus GPUs (and --failed ranks, whose padded
    slots serve nothing) with the map's slots spread evenly."""
    if shape and {"num_nodes", "num_gpus", "num_replicas"} <= set(shape):
        if args.gpus is not None and args.gpus != shape["num_gpus"]:
            raise OptionError("gpus", f"{args.gpus} contradicts {args.plan}, made for {shape['num_gpus']} GPUs; "
                              "leave --gpus out")
        return plan, recorded_cluster(shape)
    gpus = args.gpus or (shape or {}).get("num_gpus")
    if not gpus:
        raise OptionError("gpus", f"{args.plan} is an engine map that does not record GPUs; pass --gpus")
    if plan.num_replicas % gpus:
        raise OptionError("gpus", f"{args.plan} has {plan.num_replicas} slots per layer, not a multiple of {gpus} "
                          "GPUs")
    failed = gpu_ids(args.failed, "failed") if args.failed else ()
    if failed:              # an engine map padded for failed ranks (docs/formats.md): their slots serve nothing
        slots = [0 if g in failed else plan.num_replicas // gpus for g in range(gpus)]
        return live_map(plan, gpus, failed), Cluster(1, gpus, sum(slots), gpu_slots=slots)
    return plan, Cluster(1, gpus, plan.num_replicas)


def write_csv(path: Path, imbalance: dict[str, torch.Tensor]) -> None:
    splits = list(imbalance)
    first = imbalance[splits[0]]
    lines = ["microbatch,layer," + ",".join(splits)]
    cols = [imbalance[s].tolist() for s in splits]
    for b in range(first.shape[0]):
        for layer in range(first.shape[1]):
            lines.append(f"{b},{layer}," + ",".join(f"{c[b][layer]:.6f}" for c in cols))
    write_text_atomic(path, "\n".join(lines) + "\n")


def histogram_svg(imbalance: dict[str, torch.Tensor], bins: int = 40, width: int = 640, height: int = 320) -> str:
    """A self-contained SVG: overlaid histograms of per-(micro-batch, layer) imbalance."""
    colours = {"even": "#d62728", "scheduled": "#1f77b4"}
    values = {k: v.flatten().to(torch.float64).cpu() for k, v in imbalance.items()}
    lo = min(float(v.min()) for v in values.values())
    hi = max(float(v.max()) for v in values.values())
    hi = max(hi, lo + 1e-6)
    left, bottom, top = 50, height - 40, 20
    plot_w, plot_h = width - left - 20, bottom - top
    counts = {k: torch.histc(v, bins=bins, min=lo, max=hi) for k, v in values.items()}
    peak = max(float(c.max()) for c in counts.values()) or 1.0
    bar_w = plot_w / bins
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<line x1="{left}" y1="{bottom}" x2="{left + plot_w}" y2="{bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{bottom}" x2="{left}" y2="{top}" stroke="black"/>']
    for name, c in counts.items():
        colour = colours.get(name, "#555555")
        for i, n in enumerate(c.tolist()):
            if n <= 0:
                continue
            h = plot_h * n / peak
            parts.append(f'<rect x="{left + i * bar_w:.1f}" y="{bottom - h:.1f}" width="{bar_w:.1f}" '
                         f'height="{h:.1f}" fill="{colour}" fill-opacity="0.5"/>')
    for i in range(5):
        x = lo + (hi - lo) * i / 4
        px = left + plot_w * i / 4
        parts.append(f'<text x="{px:.1f}" y="{bottom + 15}" text-anchor="middle">{x:.3f}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 5}" text-anchor="middle">'
                 f'max / mean GPU load per micro-batch and layer</text>')
    parts.append(f'<text x="12" y="{top + plot_h / 2}" transform="rotate(-90 12 {top + plot_h / 2})" '
                 f'text-anchor="middle">count (peak {int(peak)})</text>')
    for i, name in enumerate(counts):
        parts.append(f'<rect x="{left + plot_w - 110}" y="{top + 5 + 16 * i}" width="10" height="10" '
                     f'fill="{colours.get(name, "#555555")}" fill-opacity="0.5"/>')
        parts.append(f'<text x="{left + plot_w - 95}" y="{top + 14 + 16 * i}">{name} split</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
