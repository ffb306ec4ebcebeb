"""A plan as downloadable files in every export format, with the engine flags that read them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from solvers import Problem
from solvers.plan import Plan
from solvers.planfile import dumps_plan, plan_document
from solvers.workloads.exporters import engine_flags, engine_text


@dataclass(frozen=True)
class Download:
    """One file: ``build()`` makes its bytes when asked (a download button calls it on click,
    so drawing the page never serialises every format)."""

    label: str
    filename: str
    mime: str
    build: Callable[[], bytes]
    usage: str          # how an engine or the CLI reads the file (markdown)

    @property
    def data(self) -> bytes:
        return self.build()


def plan_downloads(plan: Plan, problem: Problem, *, policy: str, solver: str, options: dict[str, Any],
                   metrics: dict[str, Any], layer_offset: int = 0, loads_name: str = "",
                   result: Any = None) -> list[Download]:
    """The plan in our JSON, SGLang's expert-location JSON, TensorRT-LLM's load-balancer YAML
    and CSV. ``layer_offset``: dense layers before the first MoE layer (engines count them);
    ``result``: the SolveResult, whose bounds, termination and solution status our JSON records."""
    plan = plan.to("cpu")

    def eplb_json() -> bytes:
        doc = plan_document(plan, problem, policy=policy, solver=solver, options=options, metrics=metrics,
                            provenance={"loads": loads_name, "tool": "eplb app"}, result=result,
                            dense_layers=layer_offset)
        return dumps_plan(doc).encode()

    redundant = problem.num_replicas - problem.num_experts
    # uneven slot counts or failed GPUs: engine maps cannot say so (docs/formats.md)
    slot_gpus = None if problem.cluster.uniform_slots else problem.cluster.slot_gpus()
    gpu_slots = None if slot_gpus is None else list(problem.cluster.gpu_slots)
    failed = list(problem.cluster.failed)
    live_counts = {c for c in problem.cluster.gpu_slots if c > 0}
    downloads = [
        Download("EPLB plan (JSON)", "plan.json", "application/json",
                 eplb_json,
                 "`eplb score --loads LOADS --plan plan.json` re-scores it; `eplb convert plan.json --to sglang` "
                 "converts it. Holds `phy2log`, `log2phy`, `logcnt`, the problem shape, metrics and provenance."),
        Download("SGLang expert location (JSON)", "expert_location_sglang.json", "application/json",
                 lambda: engine_text(plan, "sglang", layer_offset=layer_offset, gpu_slots=gpu_slots).encode(),
                 f"`{engine_flags('sglang', 'expert_location_sglang.json', problem.num_replicas, problem.num_experts, failed=failed, num_gpus=problem.num_gpus)}` "
                 f"(the map starts with {layer_offset} dense-layer row(s))."),
        Download("TensorRT-LLM load balancer (YAML)", "moe_load_balancer.yaml", "application/x-yaml",
                 lambda: engine_text(plan, "trtllm", layer_offset=layer_offset).encode(),
                 f"`{engine_flags('trtllm', 'moe_load_balancer.yaml', problem.num_replicas, problem.num_experts)}` "
                 f"({problem.num_replicas} slots; MoE layers keyed from {layer_offset})."),
        Download("Slot table (CSV)", "plan.csv", "text/csv",
                 lambda: engine_text(plan, "csv", num_gpus=problem.num_gpus, slot_gpus=slot_gpus).encode(),
                 "`layer,slot,gpu,expert,replica`, one row per slot: for review, spreadsheets and custom "
                 "loaders (vLLM computes its own placement: `--enable-eplb --num-redundant-experts "
                 f"{redundant}`)."),
    ]
    if slot_gpus is not None:
        # failed GPUs with the same slot count on every live one: SGLang's map, padded (the
        # engine masks the failed ranks); otherwise engine maps cannot say it (docs/formats.md)
        keep = ("plan.json", "plan.csv") + (("expert_location_sglang.json",) if failed and len(live_counts) == 1 else ())
        downloads = [d for d in downloads if d.filename in keep]
    return downloads
