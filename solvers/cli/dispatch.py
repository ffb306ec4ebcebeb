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
from ..planfile import read_plan
from ..safewrite import write_text_atomic
from .inputs import dropped_note


def cmd_microbatch(args: argparse.Namespace) -> int:
    sampling = (args.tokens_per_microbatch, args.top_k, args.microbatches)
    if args.steps_as_microbatches and any(v is not None for v in sampling):
        raise OptionError("steps_as_microbatches", "takes the trace's steps as they are: do not pass "
                          "--tokens-per-microbatch, --top-k or --microbatches with it")
    plan, doc = read_plan(args.plan)
    shape = doc["problem"]
    info = read_loads(args.loads)                   # MoE layers: leading all-zero layers dropped
    trace = info.trace if info.trace is not None else info.weights.unsqueeze(0)
    if trace.dim() != 3 or tuple(trace.shape[1:]) != (shape["num_layers"], shape["num_experts"]):
        raise OptionError("loads", f"{args.loads} has shape {tuple(trace.shape)} but the plan is for "
                          f"[steps, {shape['num_layers']}, {shape['num_experts']}]")
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
    P = shape["num_gpus"]
    imbalance = {split: microbatch_imbalance(plan, tokens, P, split) for split in ("even", "scheduled")}
    summary = {"plan": str(args.plan), "loads": str(args.loads), **source, "layers": shape["num_layers"],
               "gpus": P, "replicas": shape["num_replicas"],
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
              f"{shape['num_layers']} layers{dropped_note(info)}: max / mean GPU load per micro-batch and layer")
        print(f"{'split':<10} {'mean':>8} {'p50':>8} {'p99':>8} {'worst':>8}")
        for split, s in summary["imbalance"].items():
            print(f"{split:<10} {s['mean']:8.4f} {s['p50']:8.4f} {s['p99']:8.4f} {s['worst']:8.4f}")
        for path in summary.get("written", []):
            print(f"wrote {path}")
    return 0


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
