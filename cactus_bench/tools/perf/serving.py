"""The serving sweep (`make bench-serving`): does a rule's gain survive a busy server? Every method of a
spec, and the verifier alone, decodes the same requests at each batch size B and draft length m; per cell:
total tokens/s, each request's time to first token and time per output token at P50/P90/P99, AL and
acceptance per draft position, and the speedup over the verifier alone at the same B (docs/benchmarks.md).

The workload of a cell is every request submitted at once (an offline burst, as `vllm bench serve` with an
infinite request rate): the engine decodes B at a time and a finished row's slot takes the next request.
A request's latencies are measured from that moment:

    e2e   its finish;  TTFT  its first streamed chunk (queueing, prefill and its first round included);
    TPOT  (e2e − TTFT) / (tokens − 1), the time per token once its reply has started;
    ITL   the gaps between its streamed chunks (a round's tokens arrive together), as vLLM's benchmark
          measures them (`vllm_format.py` writes each cell as `vllm bench serve` does).

Repeats are interleaved within a batch size: each repeat decodes every cell of that B once, in a shuffled
order, so a load change hits all alike; a cell's speedup is Σ verifier-alone time / Σ method time over the
repeats (both at the same B),
with a 95 % t interval over repeats on the log of each repeat's ratio (the interval is the machine's noise
over repeats, not the items': every repeat decodes the same requests, from the same random streams).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cactus_bench.core import metrics
from cactus_bench.core.decode import Decoder, Request
from cactus_bench.core.intervals import Estimate, t95
from cactus_bench.core.metrics.positions import acceptance_at
from cactus_bench.core.metrics.timing_conditions import BUSY, load_per_core

PERCENTILES = (50, 90, 99)
VERIFIER = "Verifier"  # the verifier alone's label


@dataclass(frozen=True)
class Cell:
    """One point of the sweep: a method (its row's label; VERIFIER: the verifier alone, no m) at a batch
    size and draft length, on an engine."""

    label: str
    m: int | None
    batch: int
    engine: str

    @property
    def baseline(self) -> Cell:
        return Cell(VERIFIER, None, self.batch, self.engine)

    @property
    def name(self) -> str:
        return f"{self.engine} / {self.label}" + (f" m={self.m}" if self.m else "") + f" / B={self.batch}"


@dataclass
class Decoded:
    """One decode of a cell's workload: its wall time, and per request its tokens, latencies and stats."""

    seconds: float
    tokens: dict = field(default_factory=dict)  # request key -> generated ids
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)  # {"stats": ...}: what metrics pool
    load: float = 0.0  # runnable processes per core when it finished (1-minute load average / cores)
    compiled: int = 0  # graphs the fast engine compiled during it (their seconds are in its time)
    # per request, in the order they finished (as e2e): its inter-chunk gaps, prompt length and reply text
    itl: list[list[float]] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


def decode_workload(decoder: Decoder, requests: Sequence[Request], clock=time.perf_counter) -> Decoded:
    """Submit every request at once and time each as it finishes (`Decoded`)."""
    start = clock()
    done = Decoded(0.0)
    for gen in decoder.generate(requests):
        finish = clock() - start
        out = gen.output
        done.tokens[gen.request.key] = list(out.tokens)
        done.samples.append({"stats": gen.stats()})
        done.compiled += out.graphs_compiled
        done.e2e.append(finish)
        done.prompt_tokens.append(out.prompt_tokens)
        done.texts.append(gen.text)
        chunks = out.chunk_times  # seconds from its admission, at finish − wall_time
        done.itl.append([b - a for a, b in zip(chunks, chunks[1:])])
        if chunks:
            ttft = finish - out.wall_time + chunks[0]
            done.ttft.append(ttft)
            if len(out.tokens) > 1:
                done.tpot.append((finish - ttft) / (len(out.tokens) - 1))
    done.seconds = clock() - start
    done.load = load_per_core()
    return done


class EngineDecoder:
    """A bare engine as a `Decoder` (token-id prompts, each request's stream seeded from its key as a run
    seeds it): the device check's, on a machine with nothing but the core installed."""

    def __init__(self, engine, max_new_tokens: int, seed: int = 0):
        self.engine, self.max_new_tokens, self.seed = engine, max_new_tokens, seed
        self.device = str(engine.device)

    def generate(self, requests: Sequence[Request]):
        import torch

        from cactus_bench.core.decode import Generation, Job
        from cactus_bench.core.decode.api import stable_seed

        jobs = [
            Job(
                list(r.prompt),
                r.max_new_tokens or self.max_new_tokens,
                torch.Generator().manual_seed(stable_seed(self.seed, r.key)),
                handle=r,
            )
            for r in requests
        ]
        for job, out in self.engine.run(jobs):
            yield Generation(job.handle, out, "", "")


def engine_sweep(make_engine, batches, m: int, new_tokens: int, prompt, engine: str, log=print) -> dict:
    """The device check's small sweep on bare engines (`make_engine(rule, rows)`): the verifier alone, SpS and
    Cactus at each batch size, 2·max(B) requests of `prompt` at once, two interleaved repeats."""
    from cactus_bench.core.decode import Request

    methods = ((VERIFIER, None), ("SpS", "sps"), ("Cactus", "cactus"))
    decoders = {
        Cell(label, m if rule else None, rows, engine): EngineDecoder(make_engine(rule, rows), new_tokens)
        for rows in batches
        for label, rule in methods
    }
    requests = [Request(tuple(prompt), i) for i in range(2 * max(batches))]
    rows = table_rows(run_sweep(decoders, requests, repeats=2, log=log))
    return {"rows": rows, "table": markdown(rows)}


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile, linearly interpolated between order statistics (numpy's default)."""
    if not values:
        return None
    xs = sorted(values)
    at = (len(xs) - 1) * q / 100
    lo = math.floor(at)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (at - lo)


def repeat_ratio(base: Sequence[float], method: Sequence[float]) -> Estimate | None:
    """Σ base / Σ method over paired repeats, with a 95 % t interval over repeats on the log of each repeat's
    ratio (none below 3 repeats)."""
    n = len(base)
    if not n or n != len(method) or not sum(method):
        return None
    value = sum(base) / sum(method)
    if n < 3:
        return Estimate(value, None, None, n)
    logs = [math.log(b / m) for b, m in zip(base, method)]
    half = t95(n - 1) * statistics.stdev(logs) / math.sqrt(n)
    return Estimate(value, value * math.exp(-half), value * math.exp(half), n)


def predicted_speedup(method: list[dict], base: list[dict]) -> float | None:
    """The cost model of `metrics.cost_model` per batch round: τ · (t₁ + o₁) / (draft + verify + rest of a
    round), from the cells' own round times (every row of a batch round records that round's times, so the
    mean over row-rounds is the mean round); prefill, refill and the batch's draining tail are left out. None
    where the backend does not split a round into its parts (vLLM: a request's one wall time)."""
    m, b = metrics.pool(method), metrics.pool(base)
    if not m.get("t_verify") or not b.get("t_verify"):
        return None
    calls, steps = m.get("verifier_calls"), b.get("verifier_calls")
    if not calls or not steps or not m.get("drafted"):
        return None
    tau = m["new_tokens"] / calls
    round_time = (m["t_draft"] + m["t_verify"] + m["t_rule"] + m["t_other"]) / calls
    step_time = (b["t_verify"] + b["t_rule"] + b["t_other"]) / steps
    return tau * step_time / round_time if round_time else None


def build_cells(
    spec_path: str,
    pair: str | None,
    data: str | None,
    labels: list[str] | None,
    batches: list[int],
    ms: list[int],
    engines: list[str],
    items: int,
    max_gen_toks: int,
    overrides: Sequence[str] = (),
) -> tuple[dict[Cell, Decoder], list[Request], str]:
    """(each cell's decoder, the requests, the sweep's title) for a spec's pair, dataset and rows (`labels`:
    some of them; the verifier alone always): every cell composed and validated before any model loads."""
    from cactus_bench.adapters.benchmarks.base import make_benchmark
    from cactus_bench.app.compose import compose
    from cactus_bench.app.config import validate
    from cactus_bench.app.run import get_decoder
    from cactus_bench.tools.report.specs import SpecError, load_spec, run_overrides

    spec = load_spec(spec_path, {"pair": pair, "data": data and [data]})
    spec["timing_sample"] = None  # timed here, not by a run's timing sample
    unknown = set(labels or ()) - {r["label"] for r in spec["rows"]}
    if unknown:
        known = ", ".join(r["label"] for r in spec["rows"])
        raise SpecError(f"rows={','.join(sorted(unknown))}: not a row of {spec_path} (its rows: {known})")
    rows = [r for r in spec["rows"] if r["method"] != "ar" and (not labels or r["label"] in labels)]
    dataset = spec["data"][0]
    runs = {}
    for row in [{"label": VERIFIER, "method": "ar"}, *rows]:
        for m in [None] if row["method"] == "ar" else ms:
            for batch in sorted(batches, reverse=True):  # an engine started for the most rows serves the rest
                for engine in engines:
                    cell = {**spec, "m": m or spec["m"], "batch_size": batch, "engine": engine, "limit": items}
                    cell["max_gen_toks"] = max_gen_toks
                    config = compose(tuple(run_overrides(cell, row, dataset) + list(overrides)))
                    runs[Cell(row["label"], m, batch, engine)] = validate(config)
    first = next(iter(runs.values()))
    bench = make_benchmark(first.cfg.data)
    if not hasattr(bench, "requests"):
        raise SpecError(f"data={dataset}: the serving sweep takes a generation task's prompts (gsm8k, arith, ...)")
    decoders = {cell: get_decoder(run) for cell, run in runs.items()}
    bench.prepare(next(iter(decoders.values())), first.identity.pair_name)
    return decoders, bench.requests(bench.items(items)), f"{spec['pair']} on {dataset}"


def run_sweep(
    decoders: dict[Cell, Decoder],
    requests: Sequence[Request],
    repeats: int,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> dict[Cell, list[Decoded]]:
    """One batch size at a time: warm each of its cells up once (compiles, caches), then `repeats` interleaved
    repeats of them in shuffled orders. A speedup compares cells of one batch size; a model keeps one batched
    row cache, so interleaving batch sizes would rebuild it at every switch and, on the fast engine, recompile
    its graphs inside timed decodes. The fast engine's graphs (one per forward width, key bucket, row count and
    cache) outnumber a run's limit over a sweep: every one is compiled in a warm-up."""
    from cactus_bench.core.decode import graphs

    limit = graphs.RECOMPILE_LIMIT
    graphs.RECOMPILE_LIMIT = max(limit, 64 * len(decoders))
    timed: dict[Cell, list[Decoded]] = {cell: [] for cell in decoders}
    rng = random.Random(seed)
    try:
        for batch in sorted({cell.batch for cell in decoders}):
            group = [cell for cell in decoders if cell.batch == batch]
            for cell in group:
                decode_workload(decoders[cell], requests)
                log(f"warmed up: {cell.name}")
            for r in range(repeats):
                rng.shuffle(group)
                for cell in group:
                    timed[cell].append(decode_workload(decoders[cell], requests))
                log(f"B={batch}: repeat {r + 1}/{repeats} done")
    finally:
        graphs.RECOMPILE_LIMIT = limit
    return timed


def cell_row(cell: Cell, runs: list[Decoded], base: list[Decoded], same_tokens: bool | None) -> dict:
    """One row of the table: throughput, latency percentiles, acceptance, the speedup at this batch size."""
    tokens = sum(len(t) for d in runs for t in d.tokens.values())
    seconds = sum(d.seconds for d in runs)
    samples = [s for d in runs for s in d.samples]
    c = metrics.pool(samples)
    row = {
        "engine": cell.engine,
        "method": cell.label,
        "m": cell.m,
        "batch": cell.batch,
        "requests": len(runs[0].tokens),
        "repeats": len(runs),
        "tokens_per_s": tokens / seconds if seconds else None,
        "al": metrics.accepted_length(c),
        "acceptance_at": acceptance_at(c),
        "same_tokens_as_b1": same_tokens,
        "seconds": [d.seconds for d in runs],
        "load": max(d.load for d in runs + base),  # the busiest moment of this cell's or its baseline's repeats
        "compiled_while_timed": sum(d.compiled for d in runs + base),
    }
    for name in ("ttft", "tpot", "e2e"):
        values = [v for d in runs for v in getattr(d, name)]
        row[name] = {f"p{q}": percentile(values, q) for q in PERCENTILES} if values else None
    tpot = row["tpot"]
    row["tokens_per_s_per_request"] = 1 / tpot["p50"] if tpot and tpot["p50"] else None
    if cell.label != VERIFIER:
        s = repeat_ratio([d.seconds for d in base], [d.seconds for d in runs])
        row["speedup"] = list(s) if s is not None else None
        row["predicted_speedup"] = predicted_speedup(samples, [x for d in base for x in d.samples])
    return row


def table_rows(timed: dict[Cell, list[Decoded]]) -> list[dict]:
    """Every cell's row; `same_tokens_as_b1`: whether each request's tokens equal those of the same method
    (and m, engine) at B = 1, in every repeat."""
    rows = []
    for cell, runs in timed.items():
        one = timed.get(Cell(cell.label, cell.m, 1, cell.engine))
        same = None if one is None else all(d.tokens == one[0].tokens for d in runs + one)
        rows.append(cell_row(cell, runs, timed[cell.baseline], same))
    return rows


def best_m(rows: list[dict]) -> dict[tuple[str, str, int], int]:
    """(engine, method, batch) -> the draft length with the highest tokens/s."""
    best: dict[tuple[str, str, int], dict] = {}
    for r in rows:
        if r["m"] is None:
            continue
        key = (r["engine"], r["method"], r["batch"])
        if key not in best or r["tokens_per_s"] > best[key]["tokens_per_s"]:
            best[key] = r
    return {k: v["m"] for k, v in best.items()}


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{1000 * x:.1f}"


def _speedup(s: list | None) -> str:
    if not s:
        return "–"
    value, low, high, _ = s
    return f"{value:.2f}×" + (f" [{low:.2f}, {high:.2f}]" if low is not None else "")


def markdown(rows: list[dict]) -> str:
    """The table: one line per cell, the best m per (engine, method, batch) marked with *, a speedup timed on a
    busy machine (load above `BUSY` per core in any of its repeats or its baseline's) marked (busy), one whose
    timed decodes compiled graphs marked (compiled), and the notes saying so below."""
    best = best_m(rows)
    lines = [
        "| engine | method | m | B | tokens/s | tokens/s per request | TTFT ms P50 / P90 / P99 "
        "| TPOT ms P50 / P90 / P99 | AL | acc. at j (given 1..j−1) | speedup vs verifier at this B [95 % CI] "
        "| predicted | same tokens as B=1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["engine"], r["method"] != VERIFIER, r["method"], r["m"] or 0, r["batch"])):
        mark = "*" if r["m"] is not None and best.get((r["engine"], r["method"], r["batch"])) == r["m"] else ""
        lat = {k: " / ".join(_ms((r[k] or {}).get(f"p{q}")) for q in PERCENTILES) for k in ("ttft", "tpot")}
        acc = ", ".join(f"{a:.2f}" for a in r["acceptance_at"] if a is not None) if r["acceptance_at"] else "–"
        pred, al = r.get("predicted_speedup"), r["al"]
        marks = " (busy)" if r["load"] > BUSY and r.get("speedup") else ""
        marks += " (compiled)" if r.get("compiled_while_timed") and r.get("speedup") else ""
        lines.append(
            f"| {r['engine']} | {r['method']} | {r['m'] or '–'}{mark} | {r['batch']} | {r['tokens_per_s']:.1f} "
            f"| {r['tokens_per_s_per_request'] or 0:.1f} | {lat['ttft']} | {lat['tpot']} "
            f"| {'–' if al is None else f'{al:.2f}'} | {acc} | {_speedup(r.get('speedup'))}{marks} "
            f"| {'–' if pred is None else f'{pred:.2f}×'} | {r['same_tokens_as_b1']} |"
        )
    if any(r["load"] > BUSY and r.get("speedup") for r in rows):
        lines += ["", f"(busy): timed on a busy machine (load above {BUSY:g} per core): it measures the load too."]
    if any(r.get("compiled_while_timed") and r.get("speedup") for r in rows):
        lines += [
            "",
            "(compiled): a timed decode of the cell or its baseline compiled graphs: its time holds compiling.",
        ]
    return "\n".join(lines)
