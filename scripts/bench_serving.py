"""The serving sweep: every method of a spec and the verifier alone, over batch size B x draft length m, on
real prompts of the spec's dataset (default: the demo's embedded pair on arith). Per cell: total tokens/s,
TTFT and TPOT percentiles, AL and acceptance per position, and the speedup over the verifier alone at the
same B with its interval over interleaved repeats (`cactus_bench/tools/perf/serving.py` defines each).
Writes <out>.md / <out>.json and the Pareto and speedup-against-B figures beside them (<out>_pareto.png,
<out>_speedup.png), and every cell as `vllm bench serve` saves its results under <out>_vllm_bench/ (`vllm_format.py`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from cactus_bench.app.errors import explain_composition, fail
from cactus_bench.core.cli import Command, Key
from cactus_bench.core.decode.api import ModelLoadError
from cactus_bench.tools.perf import serving, serving_figures, vllm_format
from cactus_bench.tools.perf.results import write_results

SMALL = {"items": 10, "max_gen_toks": 16, "batches": [1, 4], "ms": [2, 4], "repeats": 3, "engines": ["eager"]}


def main():
    command = Command(
        prog="python scripts/bench_serving.py",
        about=__doc__,
        keys=(
            Key(
                "small",
                "10 items, 16 tokens, B 1 and 4, m 2 and 4, eager, SpS and Cactus (seconds; a test runs it)",
                False,
                bool,
            ),
            Key("spec", "the table spec whose pair, dataset and rows are swept", "sweeps/demo.yaml"),
            Key("pair", "the spec's pair (e.g. smollm2)"),
            Key("data", "the dataset (a generation task; default: the spec's first)"),
            Key("rows", "the spec's rows (labels) to sweep besides the verifier alone (default: all)", kind=list),
            Key("batches", "batch sizes", [1, 2, 4, 8, 16], list, item=int),
            Key("ms", "draft lengths", [2, 4, 8], list, item=int),
            Key("engines", "engines (conf/engine: eager, fast; vllm in .venv-vllm)", ["eager", "fast"], list),
            Key("items", "requests in each cell's workload", 32, int),
            Key("max_gen_toks", "token budget per request", 48, int),
            Key("repeats", "interleaved repeats", 3, int),
            Key("threads", "torch threads", 1, int),
            Key("out", "result files' path without suffix (.md, .json; figures beside)", "results/bench/serving"),
        ),
        overrides="Hydra overrides for every cell (e.g. temperature=0.8)",
    )
    args = command.parse()
    if args.small:  # small's settings, but where the command line gave one (small=true engines=eager,fast)
        defaults = {k.name: k.default for k in command.keys}
        for k, v in SMALL.items():
            if getattr(args, k) == defaults[k]:
                setattr(args, k, v)
        args.rows = args.rows or ["SpS", "Cactus δ=0.05"]
    torch.set_num_threads(args.threads)
    logging.getLogger("cactus_bench").setLevel(logging.WARNING)
    try:
        decoders, requests, title = serving.build_cells(
            args.spec, args.pair, args.data, args.rows, args.batches, args.ms, args.engines, args.items,
            args.max_gen_toks, args.overrides,
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001  (a bad spec, row, override or dataset: one paragraph, no traceback)
        explained = explain_composition(e, args.overrides) or e
        if not isinstance(explained, (ValueError, OSError, ModelLoadError)):
            raise
        fail(explained)
    print(f"{len(decoders)} cells x {len(requests)} requests x {args.repeats} repeats", flush=True)
    timed = serving.run_sweep(decoders, requests, args.repeats)
    rows = serving.table_rows(timed)
    out = Path(args.out)
    paths = serving_figures.draw(rows, out.parent, title, out.name)
    best = serving.best_m(rows)
    best_lines = ["| engine | method | B | best m (tokens/s) |", "|---|---|---|---|"]
    best_lines += [f"| {e} | {meth} | {b} | {m} |" for (e, meth, b), m in sorted(best.items())]
    md = "\n".join(
        [
            f"# Serving sweep: {title}, {len(requests)} requests at once per cell, {args.max_gen_toks} tokens "
            f"at most, {args.repeats} interleaved repeats",
            "",
            "Tokens/s: all requests' tokens over the cell's wall time; per request: 1 / median TPOT. TTFT from "
            "the burst's start (queueing included). Speedup: Σ verifier-alone time / Σ method time at the same "
            "B, 95 % CI over repeats. Predicted: the cost model per batch round (prefill and the tail left "
            "out). * marks the best m at that B.",
            "",
            serving.markdown(rows),
            "",
            "## Best m per batch size",
            "",
            *best_lines,
            "",
            *(f"![{name}]({p.name})" for name, p in paths.items()),
        ]
    )
    print(md)
    # each cell as `vllm bench serve` saves a result, in `vllm bench sweep`'s layout (docs/benchmarks.md)
    pair = title.split(" on ")[0]
    folder = out.parent / f"{out.name}_vllm_bench"
    summaries = vllm_format.write(timed, folder, model_id=pair)
    print(f"vLLM-format results: {len(summaries)} cells under {folder}")
    reproduce = command.command_line(args)
    write_results(out, md, {"args": vars(args), "rows": rows, "best_m": [[*k, v] for k, v in best.items()]}, reproduce)


if __name__ == "__main__":
    main()
