"""The shipped datasets (``datasets/`` at the repository root), loaded by name.

They are package data of ``solvers.workloads`` (``solvers/workloads/data`` links to ``datasets/``),
found through :mod:`importlib.resources`, so they work from a checkout, an editable install and
an installed wheel alike.

``datasets/catalog.json`` lists every dataset with its file, shape, checksum and the
exact command that regenerates it. Rebuild all generated ones with
``eplb datasets --rebuild`` (``loads_sha256`` checks the regenerated counts are identical).
Set ``EPLB_DATASETS`` to use another directory.
"""
from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LoadFileError, OptionError
from ..planfile import file_sha256
from ..routing.generator import generate_routing
from ..routing.trace import save_routing
from .generators import SCENARIOS, generate
from .trace import save_trace
from ..safewrite import write_text_atomic
from .specs import CATALOG_FILE, PACKAGE_DATA, dataset_names, datasets_dir, read_catalog  # noqa: F401  (re-exported)


# name -> generate() arguments. Small enough to ship (a few MB in all), large enough to
# plan on: full model shapes with few, large steps, or small models with many steps.
GENERATED: dict[str, dict[str, Any]] = {
    "deepseek-v3-mild": dict(model="deepseek-v3", scenario="mild", steps=24, tokens_per_step=16384, seed=0),
    "deepseek-v3-skewed": dict(model="deepseek-v3", scenario="skewed", steps=24, tokens_per_step=16384, seed=0),
    "deepseek-v3-shifting-mix": dict(model="deepseek-v3", scenario="shifting-mix", steps=32, tokens_per_step=16384,
                                     seed=0, overrides={"shift_every": 8}),
    "qwen3-235b-mild": dict(model="qwen3-235b", scenario="mild", steps=16, tokens_per_step=16384, seed=0),
    "kimi-k2-skewed": dict(model="kimi-k2", scenario="skewed", steps=16, tokens_per_step=16384, seed=0),
    "olmoe-1b-7b-drifting": dict(model="olmoe-1b-7b", scenario="drifting", steps=400, tokens_per_step=4096, seed=0),
    "olmoe-1b-7b-bursty": dict(model="olmoe-1b-7b", scenario="bursty", steps=200, tokens_per_step=4096, seed=0),
    "mixtral-8x7b-shifting-mix": dict(model="mixtral-8x7b", scenario="shifting-mix", steps=500,
                                      tokens_per_step=4096, seed=0),
}


# name -> generate_routing() arguments: per-token routing traces (kind "routing"; read by
# --routing, and by --loads as their load counts). Small: uint8 ids, a few thousand tokens.
ROUTING: dict[str, dict[str, Any]] = {
    "deepseek-v3-routing": dict(model="deepseek-v3", seed=0, num_tokens=3072),
}


def routing_command(name: str) -> str:
    """The ``eplb routing generate`` command line that writes routing dataset ``name``."""
    spec = ROUTING[name]
    return (f"eplb routing generate {spec['model']} --tokens {spec['num_tokens']} --seed {spec['seed']} "
            f"--out datasets/{name}.npz")


# Hand-made examples kept in the catalog (not regenerated).
EXAMPLES: dict[str, dict[str, Any]] = {
    "readme-example": {"name": "readme-example", "file": "examples/readme.json", "kind": "example",
                       "description": "The 2-layer, 12-expert example of DeepSeek's EPLB README "
                                      "(plan it with 16 replicas, 4 groups, 2 nodes, 8 GPUs).",
                       "steps": 1, "num_layers": 2, "num_experts": 12, "num_groups": 4, "top_k": None,
                       "command": None},
}


def generate_command(name: str) -> str:
    """The ``eplb generate`` command line that writes dataset ``name``."""
    spec = GENERATED[name]
    parts = ["eplb", "generate", spec["model"], "--scenario", spec["scenario"], "--steps", str(spec["steps"]),
             "--seed", str(spec["seed"]), "--tokens-per-step", str(spec["tokens_per_step"])]
    for key, value in spec.get("overrides", {}).items():
        parts += ["--set", f"{key}={json.dumps(value)}"]
    return " ".join(shlex.quote(p) for p in parts + ["--out", f"datasets/{name}.npz"])


def list_datasets() -> list[dict[str, Any]]:
    """Every shipped dataset: name, file, description, model, scenario, shape, sha256, command..."""
    return [dict(e) for e in read_catalog()]


def dataset_path(name: str) -> Path:
    """The file of dataset ``name``; unknown names raise OptionError listing the known ones."""
    entries = {e.get("name"): e for e in read_catalog()}
    if name not in entries:
        raise OptionError("dataset", f"unknown dataset {name!r}; known: {', '.join(map(str, entries))}")
    path = datasets_dir() / entries[name]["file"]
    if not path.is_file():
        raise LoadFileError("dataset", f"{name}: file {path} is missing")
    return path


def loads_sha256(loads) -> str:
    """Checksum of the counts themselves (int64, C order): unlike the file's bytes it does not
    depend on compression or zip timestamps, so a regenerated dataset can be compared."""

    return hashlib.sha256(np.ascontiguousarray(loads.numpy().astype(np.int64)).tobytes()).hexdigest()


def build_catalog(names: list[str] | None = None) -> list[dict[str, Any]]:
    """(Re)generate the generated datasets and write ``catalog.json`` (keeps other entries)."""

    root = datasets_dir()
    root.mkdir(parents=True, exist_ok=True)
    try:
        entries = {e["name"]: e for e in read_catalog()}
    except LoadFileError:
        entries = {}
    for name, entry in EXAMPLES.items():
        entries.setdefault(name, dict(entry))
        if (root / entry["file"]).is_file():
            entries[name]["bytes"] = (root / entry["file"]).stat().st_size
            entries[name]["sha256"] = file_sha256(root / entry["file"])
    for name in [n for n in (names or list(GENERATED)) if n in GENERATED]:
        spec = GENERATED[name]
        trace = generate(spec["model"], spec["scenario"], steps=spec["steps"], seed=spec["seed"],
                         tokens_per_step=spec["tokens_per_step"], **spec.get("overrides", {}))
        path = save_trace(trace, root / f"{name}.npz")
        entries[name] = {
            "name": name, "file": path.name, "kind": "generated",
            "description": f"{trace.meta['model_name']}, scenario {spec['scenario']}: "
                           f"{SCENARIOS[spec['scenario']].description}"
                           + "".join(f" Override: {k}={v}." for k, v in spec.get("overrides", {}).items()),
            "model": spec["model"], "scenario": spec["scenario"], "steps": trace.num_steps,
            "num_layers": trace.num_layers, "num_experts": trace.num_experts,
            "num_groups": trace.meta["num_groups"], "top_k": trace.meta["top_k"],
            "tokens_per_step": spec["tokens_per_step"], "seed": spec["seed"],
            "overrides": spec.get("overrides", {}), "bytes": path.stat().st_size,
            "sha256": file_sha256(path), "loads_sha256": loads_sha256(trace.loads),
            "command": generate_command(name),
        }
    for name in [n for n in (names or list(ROUTING)) if n in ROUTING]:
        spec = ROUTING[name]
        routing = generate_routing(spec["model"], spec["seed"], num_tokens=spec["num_tokens"])
        path = save_routing(routing, root / f"{name}.npz")
        entries[name] = {
            "name": name, "file": path.name, "kind": "routing",
            "description": f"{routing.meta['model_name']}: per-token top-{routing.top_k} routing of "
                           f"{routing.num_tokens} tokens from a seeded generator with co-activation "
                           f"structure (topics favouring communities of experts across the groups, a drifting "
                           f"topic mix, group-limited routing) and source ranks of {routing.num_ranks} GPUs.",
            "model": spec["model"], "steps": 1, "num_layers": routing.num_layers,
            "num_experts": routing.num_experts, "num_groups": routing.meta["num_groups"],
            "top_k": routing.top_k, "tokens": routing.num_tokens, "seed": spec["seed"],
            "bytes": path.stat().st_size, "sha256": file_sha256(path),
            "topk_sha256": hashlib.sha256(routing.topk_ids.numpy().astype(np.int64).tobytes()).hexdigest(),
            "command": routing_command(name),
        }
    doc = {"format": "eplb-datasets", "version": 1,
           "datasets": sorted(entries.values(), key=lambda e: (e.get("kind") != "example", e["name"]))}
    write_text_atomic(root / CATALOG_FILE, json.dumps(doc, indent=2) + "\n")
    return doc["datasets"]

