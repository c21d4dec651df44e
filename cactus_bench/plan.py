"""What a sweep will cost, before it runs:

    python -m cactus_bench.plan sweeps/table1.yaml [shards=8] [gpu=h100|a100|h200] [limit=...] [pair=...]

For every cell of the table spec: items, expected generated tokens per item, expected seconds per item,
and the total GPU hours and wall time with the chosen shard count (one GPU per shard). Every figure says
where it comes from: `stored` (the store's runs of that cell), `measured` (results/gpu/<gpu>.json from
`scripts/device_check.py`), or `estimate` (the cost model below).

Cost model (batch size 1 decoding is memory-bound): one forward streams the weights once, so a token of the
verifier alone costs bytes(verifier) / (bandwidth · efficiency), at least MIN_FORWARD_S (small drafters are
launch-bound); a speculative round costs m drafter steps plus one verifier forward and emits AL + 1 tokens.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from .app.schema import default_paths
from .methods import BASELINE, is_baseline
from .report import compose_cell, find_run, load_runs, load_spec

BANDWIDTH = {"h100": 3.35e12, "h200": 4.8e12, "a100": 2.0e12}  # bytes/s, HBM
EFFICIENCY = 0.7  # share of peak bandwidth a decode step reaches (the device check measures it)
MIN_FORWARD_S = 0.002  # small models are launch-bound, not bandwidth-bound: ~2 ms a forward even with CUDA graphs
BYTES_PER_PARAM = 2  # bf16
PARAMS = {  # parameters, billions (hub model cards)
    "Qwen/Qwen3-0.6B": 0.6,
    "Qwen/Qwen3-1.7B": 1.7,
    "Qwen/Qwen3-8B": 8.2,
    "Qwen/Qwen3-14B": 14.8,
    "Qwen/Qwen3-32B": 32.8,
    "Qwen/Qwen3-32B-FP8": 32.8 / 2,  # FP8: half the bytes of bf16
    "google/gemma-2-2b-it": 2.6,
    "google/gemma-2-9b-it": 9.2,
    "meta-llama/Llama-3.2-1B-Instruct": 1.2,
    "meta-llama/Llama-3.1-8B-Instruct": 8.0,
    "yongchanghao/DeepSeek-R1-Distill-Qwen-1.5B": 1.8,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": 1.8,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": 7.6,
}
TYPICAL_TOKENS = {"gsm8k": 1500, "ifeval": 1200, "gpqa": 3800, "specbench": 600, "arith": 20}  # Qwen3, thinking on
TYPICAL_AL = {"sps": 5.0, "cactus": 7.0, "cactus_exact": 7.0, "tas": 6.5, "topk": 6.0}  # m = 20, Table 1
MEASURED = Path("results") / "gpu"


def effective_bandwidth(gpu: str) -> tuple[float, str]:
    """Bytes/s a decode forward streams: measured by `scripts/device_check.py` (its verifier-alone section:
    weights / time per token) when results/gpu/<gpu>.json exists, else the peak times EFFICIENCY."""
    measured = MEASURED / f"{gpu}.json"
    if measured.is_file():
        section = json.loads(measured.read_text()).get(BASELINE, {})
        ms = (section.get("fast") or section.get("eager") or {}).get("ms_per_token")
        if ms and section.get("weights_GB"):
            return section["weights_GB"] * 1e9 / (ms / 1e3), "measured"
    return BANDWIDTH[gpu] * EFFICIENCY, "estimate"


def forward_seconds(model: str, gpu: str) -> tuple[float | None, str]:
    """Seconds per decode forward of `model` on `gpu` and where the figure comes from."""
    if model not in PARAMS:
        return None, "unknown model size"
    bandwidth, source = effective_bandwidth(gpu)
    return max(PARAMS[model] * 1e9 * BYTES_PER_PARAM / bandwidth, MIN_FORWARD_S), source


def cell_cost(cfg, run, gpu: str) -> dict:
    data = cfg.data.name
    items = _items(cfg)
    if run is not None and run.summary.get("samples"):
        tokens, tok_src = run.summary["new_tokens"] / run.summary["samples"], "stored"
    else:
        tokens, tok_src = TYPICAL_TOKENS.get(data, 1000), "estimate"
    t_v, v_src = forward_seconds(cfg.pair.verifier, gpu)
    t_d, d_src = forward_seconds(cfg.pair.drafter, gpu)
    if run is not None and run.summary.get("wall_time") and run.summary.get("samples"):
        per_item, time_src = run.summary["wall_time"] / run.summary["samples"], "stored (that machine)"
    elif t_v is None or t_d is None:
        per_item, time_src = None, "unknown model size"
    elif is_baseline(cfg.method.name):
        per_item, time_src = tokens * t_v, v_src
    else:
        al = TYPICAL_AL.get(cfg.method.name, 5.0) * cfg.m / 20
        per_item = tokens / (al + 1) * (cfg.m * t_d + t_v)
        time_src = "estimate" if "estimate" in (v_src, d_src) else "measured"
    return {
        "items": items,
        "tokens/item": round(tokens),
        "tokens from": tok_src,
        "s/item": None if per_item is None else round(per_item, 2),
        "time from": time_src,
        "GPU h": None if per_item is None else items * per_item / 3600,
    }


def _items(cfg) -> int:
    sizes = {
        "gsm8k": 1319,
        "ifeval": 541,
        "gpqa_diamond": 198,
        "gpqa_main": 448,
        "gpqa_extended": 546,
        "specbench": 480,
        "arith": 200,
    }
    n = sizes.get(cfg.data.label, 0)
    return min(n, cfg.limit) if cfg.limit else n


def plan(spec: dict, shards: int = 1, gpu: str = "h100", overrides: list[str] = ()) -> pd.DataFrame:
    runs = load_runs(default_paths().runs)
    rows = []
    for data in spec["data"]:
        for row in spec["rows"]:
            cfg = compose_cell(spec, row, data, overrides)
            cost = cell_cost(cfg, find_run(runs, cfg), gpu)
            wall = None if cost["GPU h"] is None else cost["GPU h"] / min(shards, max(cost["items"], 1))
            rows.append({"data": data, "row": row["label"], **cost, "wall h": wall})
    df = pd.DataFrame(rows)
    total = {
        "data": "total",
        "row": "",
        "items": df["items"].sum(),
        "GPU h": df["GPU h"].sum(min_count=1),
        "wall h": df["wall h"].sum(min_count=1),
    }
    out = pd.concat([df, pd.DataFrame([total])], ignore_index=True)
    return out.astype(object).where(out.notna(), "")


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or "=" in argv[0] or argv[0] in ("-h", "--help"):
        raise SystemExit(__doc__)
    keys = ("shards", "gpu", "pair", "limit")
    pairs = [a.split("=", 1) for a in argv[1:]]
    options = {k.lower(): v for k, v in pairs if k.lower() in keys}  # SHARDS=8 as in the Makefile works too
    overrides = [f"{k}={v}" for k, v in pairs if k.lower() not in keys]
    gpu = options.get("gpu", "h100").lower()
    if gpu not in BANDWIDTH:
        raise SystemExit(f"error: gpu={gpu} is not known: choose one of {', '.join(BANDWIDTH)}")
    shards = int(options.get("shards", 1))
    spec = load_spec(argv[0], {"pair": options.get("pair"), "limit": options.get("limit")})
    df = plan(spec, shards, gpu, overrides)
    text = (
        f"## Plan: {spec.get('title', spec['name'])}\n\n{shards} shard(s), one {gpu.upper()} each; "
        f"`estimate` figures come from the cost model (bf16 weights streamed once per forward at "
        f"{EFFICIENCY:.0%} of {BANDWIDTH[gpu] / 1e12:.2f} TB/s), not a measurement.\n\n"
        + df.to_markdown(index=False, floatfmt=".2f")
        + "\n"
    )
    print(text)
    return text


if __name__ == "__main__":
    main()
