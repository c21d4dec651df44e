"""What a sweep will cost, before it runs. For every cell of the table spec: items, expected generated tokens
per item, the smallest score difference against the verifier alone those items can detect, and GPU hours
side by side for the eager engine and the fast one at batch size 1, and the engine the spec runs (`engine:`;
`auto` is the fast one on a GPU) at the spec's batch size (`auto`: what fits the card's memory), plus the
timing sample's hours; then the wall time with the chosen shards (one job per shard, `slots_per_gpu` jobs per
GPU). Every figure says where it comes from: `stored` (the store's runs), `measured` (results/gpu/<gpu>.json
from `scripts/device_check.py`), or `estimate` (the model below).

Cost model (a decode forward on a GPU): the larger of
  * memory: weights plus the rows' KV cache streamed once, at EFFICIENCY x the card's bandwidth;
  * compute: 2 x params x tokens x rows FLOPs at COMPUTE_EFFICIENCY x the card's bf16 peak;
  * launches: the decode backend's launch floor per layer for each of its engines (`tools/costs.py`
    `launch_s_per_layer`; hf: eager dispatches ~72 ops a layer one by one, fast launches one CUDA graph).
A speculative round is m drafter steps and one verifier forward over m + 1 tokens and emits AL + 1 tokens;
the verifier alone emits one token per forward. Item counts and typical lengths are the dataset's own facts
(`conf/data/<name>.yaml`: items, typical_new_tokens, typical_prompt_tokens).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pandas as pd

from cactus_bench.adapters.benchmarks.base import one_request_per_item
from cactus_bench.app.errors import fail
from cactus_bench.app.runs import find_run, load_runs
from cactus_bench.app.schema import DEVICE_RESULTS_DIR
from cactus_bench.app.store import StoreError
from cactus_bench.core import metrics
from cactus_bench.core.cli import Command, Key
from cactus_bench.core.methods import BASELINE, is_baseline
from cactus_bench.tools.costs import COSTS
from cactus_bench.tools.report import compose_cell, load_spec
from cactus_bench.tools.report.specs import SPEC_KEYS, SpecError, spec_overrides
from cactus_bench.tools.report.tables import table_title

# bytes/s (HBM or GDDR), dense bf16/fp16 FLOPs (fp32 accumulate), bytes: the data sheets' figures
BANDWIDTH = {"h100": 3.35e12, "h200": 4.8e12, "a100": 2.039e12, "a100-40gb": 1.555e12, "rtx3090": 936e9}
FLOPS = {"h100": 989e12, "h200": 989e12, "a100": 312e12, "a100-40gb": 312e12, "rtx3090": 71e12}
MEMORY = {"h100": 80e9, "h200": 141e9, "a100": 80e9, "a100-40gb": 40e9, "rtx3090": 24e9}
EFFICIENCY = 0.7  # share of peak bandwidth a decode step reaches (the device check measures it)
COMPUTE_EFFICIENCY = 0.5
BYTES_PER_PARAM = 2  # bf16


@dataclass(frozen=True)
class Shape:
    params: float  # billions (hub model cards)
    layers: int
    kv_heads: int
    head_dim: int
    bytes_per_param: float = BYTES_PER_PARAM

    @property
    def weight_bytes(self) -> float:
        return self.params * 1e9 * self.bytes_per_param

    @property
    def kv_bytes(self) -> float:
        """Key and value bytes per cached position (bf16)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


MODELS = {  # config.json of the hub models
    "Qwen/Qwen3-0.6B": Shape(0.6, 28, 8, 128),
    "Qwen/Qwen3-1.7B": Shape(1.7, 28, 8, 128),
    "Qwen/Qwen3-8B": Shape(8.2, 36, 8, 128),
    "Qwen/Qwen3-14B": Shape(14.8, 40, 8, 128),
    "Qwen/Qwen3-32B": Shape(32.8, 64, 8, 128),
    "Qwen/Qwen3-32B-FP8": Shape(32.8, 64, 8, 128, bytes_per_param=1),
    "google/gemma-2-2b-it": Shape(2.6, 26, 4, 256),
    "google/gemma-2-9b-it": Shape(9.2, 42, 8, 256),
    "meta-llama/Llama-3.2-1B-Instruct": Shape(1.2, 16, 8, 64),
    "meta-llama/Llama-3.1-8B-Instruct": Shape(8.0, 32, 8, 128),
    "yongchanghao/DeepSeek-R1-Distill-Qwen-1.5B": Shape(1.8, 28, 2, 128),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": Shape(1.8, 28, 2, 128),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": Shape(7.6, 28, 4, 128),
    # the pairs of published measurements (tools/published.py)
    "lmsys/vicuna-7b-v1.3": Shape(6.7, 32, 32, 128),
    "lmsys/vicuna-13b-v1.3": Shape(13.0, 40, 40, 128),
    "lmsys/vicuna-33b-v1.3": Shape(32.5, 60, 52, 128),
    "double7/vicuna-68m": Shape(0.068, 2, 12, 64),
}
TYPICAL_AL = {"sps": 5.0, "cactus": 7.0, "cactus_exact": 7.0, "tas": 6.5, "topk": 6.0}  # m = 20, Table 1
TYPICAL_AT_M = 20


def iid_accepted(alpha: float, m: int) -> float:
    """Accepted drafts per round of m when each is accepted with probability α (Leviathan et al.'s i.i.d.
    model): α (1 − α^m) / (1 − α)."""
    return alpha * (1 - alpha**m) / (1 - alpha)


def iid_alpha(al: float, m: int) -> float:
    """The α whose i.i.d. law accepts `al` drafts a round of m (it rises with α: bisection)."""
    lo, hi = 0.0, 1.0 - 1e-12
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if iid_accepted(mid, m) < al else (lo, mid)
    return (lo + hi) / 2


def typical_al(method: str, m: int) -> float:
    """A typical AL at draft length m: the i.i.d. law fitted to the method's Table 1 AL at m = 20, so a
    shorter draft loses its last, least likely acceptances first, not a share of every one."""
    return iid_accepted(iid_alpha(TYPICAL_AL.get(method, 5.0), TYPICAL_AT_M), m)


MAX_ROWS = 64


class PlanError(ValueError):
    """A sweep the plan cannot price; the message names the file to complete."""


def dataset_facts(data) -> tuple[int, int, int]:
    """(items, typical reply tokens, typical prompt tokens) from the dataset's conf/data file."""
    missing = [k for k in ("items", "typical_new_tokens", "typical_prompt_tokens") if data.get(k) is None]
    items = data.get("items")
    if items is not None and not isinstance(items, int):  # by subset
        items = items.get(data.subset)
        if items is None:
            missing.append(f"items.{data.subset}")
    if missing:
        raise PlanError(
            f"data={data.name}: conf/data/{data.name}.yaml states no {', '.join(missing)}, so the plan cannot price "
            "it. Add them (items: how many the dataset has, by subset where it has subsets; typical_new_tokens and "
            "typical_prompt_tokens: a reply's and a prompt's usual length)."
        )
    return int(items), int(data.typical_new_tokens), int(data.typical_prompt_tokens)


def effective_bandwidth(gpu: str) -> tuple[float, str]:
    """Bytes/s a decode forward streams: measured by `scripts/device_check.py` (its verifier-alone section:
    weights / time per token) when results/gpu/<gpu>.json exists, else the peak times EFFICIENCY."""
    measured = DEVICE_RESULTS_DIR / f"{gpu}.json"
    if measured.is_file():
        section = json.loads(measured.read_text()).get(BASELINE, {})
        ms = (section.get("fast") or section.get("eager") or {}).get("ms_per_token")
        if ms and section.get("weights_GB"):
            return section["weights_GB"] * 1e9 / (ms / 1e3), "measured"
    return BANDWIDTH[gpu] * EFFICIENCY, "estimate"


def forward_seconds(
    shape: Shape, gpu: str, launch_s_per_layer: float, tokens: int = 1, rows: int = 1, context: int = 0
) -> float:
    """One forward of `tokens` new tokens for each of `rows` rows over `context` cached positions, by an engine
    whose launches cost `launch_s_per_layer`."""
    bandwidth, _ = effective_bandwidth(gpu)
    memory = (shape.weight_bytes + rows * context * shape.kv_bytes) / bandwidth
    compute = 2 * shape.params * 1e9 * tokens * rows / (FLOPS[gpu] * COMPUTE_EFFICIENCY)
    return max(memory, compute, shape.layers * launch_s_per_layer)


def auto_rows(drafter: Shape | None, verifier: Shape, gpu: str, capacity: int) -> int:
    """What batch_size=auto picks: the rows whose KV caches fit 80 % of the memory the weights leave."""
    weights = verifier.weight_bytes + (drafter.weight_bytes if drafter else 0)
    per_row = capacity * (verifier.kv_bytes + (drafter.kv_bytes if drafter else 0))
    return max(1, min(MAX_ROWS, int(0.8 * (MEMORY[gpu] - weights) // per_row)))


def item_seconds(cfg, gpu: str, launch_s: float, rows: int, tokens: float, al: float) -> float | None:
    """GPU seconds per item: a batch of `rows` items decodes together, so an item costs 1/rows of it."""
    verifier = MODELS.get(cfg.pair.verifier)
    drafter = MODELS.get(cfg.pair.drafter)
    if verifier is None or (drafter is None and not is_baseline(cfg.method.name)):
        return None
    context = dataset_facts(cfg.data)[2] + tokens / 2
    if is_baseline(cfg.method.name):
        return tokens * forward_seconds(verifier, gpu, launch_s, 1, rows, context) / rows
    m = cfg.m
    round_s = m * forward_seconds(drafter, gpu, launch_s, 1, rows, context) + forward_seconds(
        verifier, gpu, launch_s, m + 1, rows, context
    )
    return tokens / (al + 1) * round_s / rows


def cell_cost(
    cfg, run, gpu: str, timing_sample: int | None, gpus: int = 1, slots: int = 1, timed_together: int = 1
) -> dict:
    """A cell's items, tokens, rows, GPU hours per engine and batch size, and wall hours on `gpus` GPUs with
    `slots` jobs each (k jobs sharing a GPU go about as fast as one job with k times the rows). `timed_together`:
    the drafting rows that share each timed item's verifier-alone decode (`app.together`; 1: each its own)."""
    total, typical_tokens, typical_prompt = dataset_facts(cfg.data)
    items = min(total, cfg.limit) if cfg.limit else total
    if run is not None and run.summary.get("samples"):
        tokens, tok_src = run.summary["new_tokens"] / run.summary["samples"], "stored"
    else:
        tokens, tok_src = typical_tokens, "estimate"
    al = (run.summary.get("accepted_length") if run is not None else None) or typical_al(cfg.method.name, cfg.m)
    baseline = is_baseline(cfg.method.name)
    verifier, drafter = MODELS.get(cfg.pair.verifier), MODELS.get(cfg.pair.drafter)
    rows = cfg.get("batch_size", 1)
    if rows == "auto":
        capacity = typical_prompt + cfg.max_gen_toks + cfg.m + 1
        rows = auto_rows(None if baseline else drafter, verifier, gpu, capacity) if verifier else 1

    try:
        model = COSTS.get(cfg.engine.backend)
    except ValueError as e:  # a backend without a cost model: say where one goes
        raise PlanError(f"engine.backend={cfg.engine.backend} cannot be priced: {e} (tools/costs.py)") from None
    costs = model.launch_s_per_layer

    def hours(engine: str, r: int, n: int = items) -> float | None:
        s = item_seconds(cfg, gpu, costs[engine], r, tokens, al)
        return None if s is None else n * s / 3600

    engine = model.engine_on_gpu(cfg.engine.name)  # a plan is for GPUs
    timed = min(timing_sample or 0, items) if rows > 1 and not baseline else 0
    # a timed item: the method's decode and the verifier alone's (its share of it), back to back at batch size 1
    one = item_seconds(cfg, gpu, costs[engine], 1, tokens, al)
    timing = (
        None
        if one is None or verifier is None
        else timed * (one + tokens * forward_seconds(verifier, gpu, costs[engine]) / timed_together) / 3600
    )
    host = model.host_s_per_forward.get(engine, 0.0)
    predicted, predicted_from = predicted_gpu_speedup(cfg, run, gpu, costs[engine], tokens, al, host)
    chosen, packed = hours(engine, rows), hours(engine, rows * slots)
    start_s = model.startup_s
    startup = start_s.get(engine, 0.0) / 3600  # each job starts its engine once (with paired timing: two)
    if packed is not None:
        packed += startup
    return {
        "items": items,
        "tokens/item": round(tokens),
        "tokens from": tok_src,
        "B": rows,
        **{f"{e} B=1 GPU h": hours(e, 1) for e in costs},
        "engine": engine,
        "chosen GPU h": chosen,
        "timing GPU h": timing,
        **({"start-up h": startup} if start_s else {}),
        "time from": effective_bandwidth(gpu)[1],
        "speedup (predicted)": predicted,
        "speedup from": predicted_from,
        "wall h": None if packed is None else (packed + (timing or 0)) / max(1, min(gpus, items)),
    }


def round_speedup(tau: float, drafts: float, t_draft: float, t_one: float, t_verify: float, host_s: float) -> float:
    """Speedup over the verifier alone per token: τ · (t₁ + o) / (k̄ · (t_d + o) + t_verify + o), each forward
    call paying the engine's host time o beside its own."""
    return tau * (t_one + host_s) / (drafts * (t_draft + host_s) + t_verify + host_s)


def predicted_gpu_speedup(
    cfg, run, gpu: str, launch_s: float, tokens: float, al: float, host_s: float = 0.0
) -> tuple[float | None, str]:
    """The method's speedup over the verifier alone at batch size 1 on this GPU, a prediction: the cost model
    of `metrics.cost_model` per token (prefill left out), `round_speedup` with the GPU's step times from
    `forward_seconds`, the engine's host time per forward, and the acceptance profile (τ, k̄: tokens and
    drafts per verifier call) of the stored run of this cell (`stored`), else a typical AL with m drafts a
    round (`estimate`)."""
    verifier, drafter = MODELS.get(cfg.pair.verifier), MODELS.get(cfg.pair.drafter)
    if is_baseline(cfg.method.name):
        return 1.0, "definition"
    if verifier is None or drafter is None:
        return None, ""
    calls = run.summary.get("verifier_calls") if run is not None else None
    if calls:
        pooled = metrics.pool(run.samples)
        tau, drafts, source = pooled["new_tokens"] / calls, pooled["drafted"] / calls, "stored"
    else:
        tau, drafts, source = al + 1, cfg.m, "estimate"
    context = dataset_facts(cfg.data)[2] + tokens / 2
    t_d = forward_seconds(drafter, gpu, launch_s, 1, 1, context)
    t_1 = forward_seconds(verifier, gpu, launch_s, 1, 1, context)
    t_round = forward_seconds(verifier, gpu, launch_s, cfg.m + 1, 1, context)
    return round_speedup(tau, drafts, t_d, t_1, t_round, host_s), source


ASSUMED_ACCURACY = 0.5  # no stored runs: the verifier's accuracy that makes the differences widest


def detectable(cfg, run, baseline_run, items: int) -> tuple[float | None, str]:
    """The smallest score difference against the verifier alone (points) that `items` items detect, paired,
    with 80 % power at α = 0.05; the differences' deviation from the stored runs of this setting (`stored`),
    else assumed: the two decodes of an item independent draws at the verifier's accuracy p, so the
    difference's variance is 2·p·(1 − p) (p from its stored score, or 0.5)."""
    from cactus_bench.core import intervals

    if run is not None and baseline_run is not None:
        est = intervals.paired_difference(run.samples, baseline_run.samples)
        if est is not None and est.items > 2:
            return intervals.detectable_difference(intervals.difference_sd(est), items), "stored"
    score = baseline_run.summary.get("score") if baseline_run is not None else None
    p = score / 100 if score is not None else ASSUMED_ACCURACY
    return intervals.detectable_difference(100 * math.sqrt(2 * p * (1 - p)), items), "assumed"


def plan(
    spec: dict,
    shards: int = 1,
    gpu: str = "h100",
    overrides: list[str] = (),
    slots: int = 1,
    results: str | None = None,
    timing: str = "together",
) -> pd.DataFrame:
    """`results`: the stored runs read (default: where the spec's runs go, `paths.runs` with the overrides)."""
    runs_dir = results or compose_cell(spec, spec["rows"][0], spec["data"][0], overrides).paths.runs
    runs = load_runs(runs_dir)
    gpus = max(1, math.ceil(shards / slots))
    # in one process a sweep's drafting rows time their samples together (`sweep timing=together`), one
    # verifier-alone decode of an item for them all; sharded, each run times its own
    together = (
        sum(not is_baseline(row["method"]) for row in spec["rows"]) if timing == "together" and shards <= 1 else 1
    )
    rows = []
    for data in spec["data"]:
        for row in spec["rows"]:
            cfg = compose_cell(spec, row, data, overrides)
            run = find_run(runs, cfg)
            shared = max(1, together) if one_request_per_item(cfg.data) else 1  # Spec-Bench times apart
            cost = cell_cost(cfg, run, gpu, spec.get("timing_sample"), gpus, slots, shared)
            power = {"detectable Δ (pts)": None, "Δ from": ""}
            if not is_baseline(cfg.method.name) and cost["items"]:
                baseline_run = find_run(runs, compose_cell(spec, {"method": BASELINE}, data, overrides))
                size, source = detectable(cfg, run, baseline_run, cost["items"])
                power = {"detectable Δ (pts)": size, "Δ from": source}
            rows.append({"data": data, "row": row["label"], **cost, **power})
    df = pd.DataFrame(rows)
    total = {"data": "total", "row": "", "items": df["items"].sum()}
    for col in df.columns:
        if col.endswith("GPU h") or col == "wall h":
            total[col] = df[col].sum(min_count=1)
    out = pd.concat([df, pd.DataFrame([total])], ignore_index=True)
    return out.astype(object).where(out.notna(), "")


COMMAND = Command(
    prog="python -m cactus_bench.tools.plan",
    about=__doc__,
    positional=(Key("spec", "the table or figure spec (sweeps/*.yaml)", required=True),),
    keys=(
        Key("shards", "jobs each run is split into", 1, int),
        Key("gpu", "the card priced", "h100", choices=tuple(BANDWIDTH)),
        Key("slots_per_gpu", "runs sharing one GPU", 1, int),
        Key("results", "the stored runs read (default: paths.runs, which paths.results=... moves, as in a run)"),
        Key("timing", "as the sweep will time (sharded: apart)", "together", choices=("together", "apart")),
        *SPEC_KEYS,
    ),
    overrides="Hydra overrides the runs will be made with (e.g. batch_size=8)",
    examples=("python -m cactus_bench.tools.plan sweeps/table1.yaml shards=8 gpu=h200",),
)


def main(argv: list[str] | None = None) -> str:
    args = COMMAND.parse(argv)
    gpu, shards, slots, overrides = args.gpu, args.shards, args.slots_per_gpu, args.overrides
    try:
        spec = load_spec(args.spec, spec_overrides(args))
        df = plan(spec, shards, gpu, overrides, slots, args.results, args.timing)
    except (PlanError, SpecError, StoreError) as e:
        fail(e)
    text = (
        f"## Plan: {table_title(spec, overrides)}\n\n{shards} shard(s), {slots} per {gpu.upper()} "
        f"({max(1, math.ceil(shards / slots))} GPU(s)); batch size {spec.get('batch_size', 1)}"
        f"{', timing sample ' + str(spec['timing_sample']) if spec.get('timing_sample') else ''}. "
        f"`estimate` figures come from the cost model (weights and KV cache streamed at {EFFICIENCY:.0%} of "
        f"{BANDWIDTH[gpu] / 1e12:.2f} TB/s, launch-bound floors for eager and compiled forwards), not a "
        "measurement; `chosen` is the engine the runs will use (the spec's `engine`; `auto` is the fast one on a "
        "GPU) at the spec's batch size; `timing` is its timing sample at batch size 1 (unsharded, a cell's "
        "methods share each item's verifier-alone decode: `timing=apart` prices one each). `detectable Δ` is the "
        "smallest score difference against the verifier alone that the cell's items detect (paired, 80 % power, "
        "α = 0.05; docs/statistics.md), from stored runs of the setting or assumed (independent decodes at the "
        "verifier's accuracy, 0.5 when unknown). `speedup (predicted)` is a prediction, not a measurement: the "
        "method's speedup over the verifier alone at batch size 1 on this GPU from the cost model's step times and "
        "the stored run's acceptance profile (`stored`; a CPU run of the pair tells a GPU user what to expect, "
        "docs/gpu.md says how far to trust it), or a typical AL (`estimate`).\n\n"
        + df.to_markdown(index=False, floatfmt=".2f")
        + "\n"
    )
    print(text)
    return text


if __name__ == "__main__":
    main()
