"""The serving sweep's cells as `vllm bench serve` saves its results (vLLM 0.32, `--save-result
--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99`), laid out as `vllm bench sweep serve`
lays out a sweep, so a vLLM user's scripts and `vllm bench sweep plot` read them:

    <dir>/<cell>/run=<k>.json   one repeat of the cell: one benchmark of its requests, sent at once
    <dir>/<cell>/summary.json   the list of its repeats (what `vllm bench sweep plot` reads)

Every figure has vLLM's definition (`vllm/benchmarks/serve.py` `calculate_metrics`): TTFT the first streamed
chunk's time from the request's send; TPOT (latency − TTFT) / (output tokens − 1) over requests of two tokens
or more (the first token excluded); ITL every gap between consecutive chunks of every request, pooled (a
round's tokens arrive as one chunk); E2EL the latency; each as mean, median, population std and linearly
interpolated percentiles in ms; throughputs over the repeat's duration; acceptance as vLLM's spec-decode
counters (a draft counted where its round tested a first draft; per position, prefix acceptances over drafts).
docs/benchmarks.md says where the sweep's own table differs.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from datetime import datetime
from pathlib import Path

from cactus_bench.core import metrics
from cactus_bench.core.metrics.positions import passed_at
from cactus_bench.core.utils import write_text_atomic
from cactus_bench.tools.perf.serving import VERIFIER, Cell, Decoded, percentile

PERCENTILES = (50, 90, 99)
LATENCIES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}


def latency_ms(name: str, seconds: list[float]) -> dict[str, float]:
    """vLLM's statistics of one latency in ms (an empty list counts as [0], as vLLM's `values or 0`)."""
    xs = seconds or [0.0]
    out = {
        f"mean_{name}_ms": statistics.fmean(xs) * 1000,
        f"median_{name}_ms": percentile(xs, 50) * 1000,
        f"std_{name}_ms": statistics.pstdev(xs) * 1000,
    }
    return out | {f"p{q}_{name}_ms": percentile(xs, q) * 1000 for q in PERCENTILES}


def busiest_second(ttfts: list[float], itls: list[list[float]], latencies: list[float]) -> tuple[float, int]:
    """(max chunks streamed in one second, max requests live in one second) from the burst's start, as vLLM
    counts them (a chunk counts once, whatever tokens it carries)."""
    if not latencies:
        return 0.0, 0
    seconds = int(math.ceil(max(latencies))) + 1
    streamed, live = [0] * seconds, [0] * seconds
    for ttft, gaps, latency in zip(ttfts, itls, latencies):
        times = [ttft]
        for gap in gaps:
            times.append(times[-1] + gap)
        for t in times:
            if 0 <= int(t) < seconds:
                streamed[int(t)] += 1
        for s in range(int(latency) + 1):
            live[s] += 1
    return float(max(streamed)), max(live)


def spec_decode(samples: list[dict]) -> dict | None:
    """vLLM's spec-decode fields from the repeat's pooled counters (None for the verifier alone)."""
    c = metrics.pool(samples)
    tested, passed = c.get("tested_at"), passed_at(c.get("accepted_hist"))
    if not c.get("drafted") or not tested or not tested[0]:
        return None
    drafts = tested[0]
    return {
        "spec_decode_acceptance_rate": 100 * c["accepted"] / c["drafted"],
        "spec_decode_acceptance_length": 1 + c["accepted"] / drafts,
        "spec_decode_num_drafts": int(drafts),
        "spec_decode_draft_tokens": int(c["drafted"]),
        "spec_decode_accepted_tokens": int(c["accepted"]),
        "spec_decode_per_position_acceptance_rates": [p / drafts for p in passed or []],
    }


def run_result(cell: Cell, decoded: Decoded, model_id: str, run_number: int) -> dict:
    """One repeat of a cell as vLLM's result JSON, with the sweep's parameters as `vllm bench sweep` adds them."""
    outputs = [len(t) for t in decoded.tokens.values()]
    inputs, done = sum(decoded.prompt_tokens), len(decoded.e2e)
    duration = decoded.seconds
    chunks, concurrent = busiest_second(decoded.ttft, decoded.itl, decoded.e2e)
    result = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "cactus-bench",
        "backend": f"cactus-bench-{cell.engine}",
        "label": cell.name,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": done,
        "request_rate": "inf",  # every request sent at once
        "burstiness": 1.0,
        "max_concurrency": None,  # no client-side limit: the engine runs B at a time (`max_num_seqs`)
        "duration": duration,
        "completed": done,
        "failed": 0,
        "total_input_tokens": inputs,
        "total_output_tokens": sum(outputs),
        "request_throughput": done / duration,
        "request_goodput": None,
        "output_throughput": sum(outputs) / duration,
        "total_token_throughput": (inputs + sum(outputs)) / duration,
        "input_lens": decoded.prompt_tokens,
        "output_lens": outputs,
        "ttfts": decoded.ttft,
        "itls": decoded.itl,
        "latencies": decoded.e2e,
        "start_times": [0.0] * done,  # seconds from the burst's start
        "queue_times": [0.0] * done,
        "generated_texts": decoded.texts,
        "errors": [""] * done,
        "max_output_tokens_per_s": chunks,
        "max_concurrent_requests": concurrent,
        "rtfx": 0.0,
        **(spec_decode(decoded.samples) or {}),
    }
    itls = [g for gaps in decoded.itl for g in gaps]
    for name, values in (("ttft", decoded.ttft), ("tpot", decoded.tpot), ("itl", itls), ("e2el", decoded.e2e)):
        result |= latency_ms(name, values)
    sweep = {"max_num_seqs": cell.batch, "num_speculative_tokens": cell.m or 0, "method": cell.label}
    return result | {"run_number": run_number, **sweep, "engine": cell.engine}


def cell_folder(cell: Cell) -> str:
    """A cell's folder name, as vLLM's sweep names a combination (its parameters, file-name safe)."""
    method = "verifier" if cell.label == VERIFIER else cell.label
    name = f"SERVE-max_num_seqs={cell.batch}-num_speculative_tokens={cell.m or 0}-method={method}-{cell.engine}"
    return re.sub(r"[^A-Za-z0-9=._-]+", "_", name)


def write(timed: dict[Cell, list[Decoded]], folder: Path | str, model_id: str) -> list[Path]:
    """Every cell's repeats and summary under `folder` (atomically, file by file); the summaries' paths."""
    summaries = []
    for cell, runs in timed.items():
        where = Path(folder) / cell_folder(cell)
        where.mkdir(parents=True, exist_ok=True)
        results = [run_result(cell, decoded, model_id, k) for k, decoded in enumerate(runs)]
        for k, result in enumerate(results):
            write_text_atomic(where / f"run={k}.json", json.dumps(result, indent=1))
        write_text_atomic(where / "summary.json", json.dumps(results, indent=1))
        summaries.append(where / "summary.json")
    return summaries
