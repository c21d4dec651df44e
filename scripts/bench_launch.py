"""What a decode round costs the host, per engine: dispatched ops and host reads per round (see
cactus_bench/tools/perf/launch.py for why these predict GPU overhead), on the tiny pair and on random models
with Qwen3-0.6B's shape (verifier: the full 28 layers; drafter: 2 of them). Prints one line per engine and
model: `engine=<name> model=<name> ops_per_round=<n> host_syncs_per_round=<k>`.
"""

from __future__ import annotations

import torch

from cactus_bench.adapters.embedded.random_models import random_lm
from cactus_bench.core.cli import Command, Key
from cactus_bench.core.rules import RULES
from cactus_bench.tools.perf.launch import PYTHON, TIME_PARTS, decode_round_ops
from cactus_bench.tools.perf.results import write_results
from cactus_bench.tools.perf.shapes import PAIRS, SHAPES

ENGINES = {"eager": None, "fast": "inductor"}
# the same measurement at c2f15d8, before the loop's own ops were cut (issue 41), for the ratio
BEFORE = (
    "Before (c2f15d8, `decode_round_ops` on its code): eager, tiny pair, Cactus: 920.6 ops per round, the loop's "
    "own 319.0 (rule 113.0, cache and masks 87.6, statistics 36.0, sampling 34.2, bookkeeping 31.8, warp 14.4, "
    "output KL 2.0)."
)


def qwen3_06b_pair():
    shape = {**SHAPES["qwen3-0.6b"], "max_position_embeddings": 4096, "eos_token_id": None, "bos_token_id": None}
    return random_lm("qwen3", 0, **{**shape, "num_hidden_layers": 2}), random_lm("qwen3", 1, **shape)


def main():
    args = Command(
        prog="python scripts/bench_launch.py",
        about=__doc__,
        keys=(
            Key("small", "the tiny pair only, eager and traced (seconds)", False, bool),
            Key("m", "draft length", 4, int),
            Key("new_tokens", "tokens per decode", 24, int),
            Key("out", "result files' path without suffix (.md, .json)", "results/bench/launch"),
        ),
    ).parse()
    torch.set_num_threads(1)
    models = {"tiny": PAIRS["tiny"]} if args.small else {"tiny": PAIRS["tiny"], "qwen3-0.6b-shape": qwen3_06b_pair}
    engines = {"eager": None, "traced": "eager"} if args.small else ENGINES
    rows, lines, times = [], [], []
    for model, build in models.items():
        pair = build()
        for engine, compile in engines.items():
            r = decode_round_ops(pair, compile, args.m, args.new_tokens)
            parts = " ".join(f"{k.replace(' ', '_')}={v:.1f}" for k, v in r["parts_per_round"].items())
            line = (
                f"engine={engine} model={model} ops_per_round={r['ops_per_round']:.0f} "
                f"loop_ops_per_round={r['loop_ops_per_round']:.1f} host_syncs_per_round={r['host_syncs_per_round']:.0f}"
                f"\n    {parts}"
            )
            print(line, flush=True)
            lines.append(line)
            rows.append({"engine": engine, "model": model, **r})
            t = r["time_ms_per_round"]
            times.append(
                f"| {engine} | {model} | {t['compiled_calls']:.1f} | {t['round']:.2f} | "
                + " | ".join(f"{t[k]:.2f}" for k in [*TIME_PARTS, PYTHON])
                + " |"
            )
    # every rule on the tiny pair, each engine (the graphs are the same for every rule: what differs is the
    # round's tail, the rule's decision and its output-KL measurement, run eagerly)
    pair = PAIRS["tiny"]()
    per_rule = []
    for rule in sorted(RULES):
        cells = []
        for engine, compile in engines.items():
            r = decode_round_ops(pair, compile, args.m, args.new_tokens, rule)
            rows.append({"engine": engine, "model": "tiny", "rule": rule, **r})
            own, reads = r["parts_per_round"].get("rule", 0.0), r["host_syncs_per_round"]
            cells.append(f"{r['ops_per_round']:.0f} | {r['loop_ops_per_round']:.1f} | {own:.1f} | {reads:.0f}")
        per_rule.append(f"| {rule} | " + " | ".join(cells) + " |")
        print(per_rule[-1], flush=True)
    body = "\n".join(lines)
    md = f"# Ops and host reads per decode round (m = {args.m}, Cactus, one thread)\n\n```\n{body}\n```\n"
    md += (
        "\nops per round: top-level aten calls from Python + compiled-graph launches, prefill excluded; the "
        "loop's own: every op but the models' forwards (the code transformers runs too), split by the part of "
        "the round that dispatched it (`perf.launch.part_of`).\n"
    )
    md += f"\n{BEFORE}\n"
    md += (
        "\nWhere a round's time goes (ms per round, profiled without stacks, one thread; `perf.launch.round_times`): "
        "the compiled calls it makes, the kernels every loop runs (GEMMs, attention), the code torch.compile "
        "generated, dynamo around each compiled call (its region, cache lookup and guards), the other ops (eager: "
        "the models' other ops and the loop's own; fast: the loop's own), and Python outside any op. On a CPU, "
        "inductor's C++ wrapper runs most of the fast engine's GEMMs and attention inside its compiled code, where "
        "the profiler does not split them out: the fast rows' GEMMs and attention are a lower bound, their compiled "
        "code an upper one.\n\n"
    )
    md += "| engine | model | compiled calls | round | " + " | ".join([*TIME_PARTS, PYTHON]) + " |\n"
    md += "|---|---|---|---|" + "---|" * (len(TIME_PARTS) + 1) + "\n" + "\n".join(times) + "\n"
    md += (
        "\nEvery rule (default parameters), tiny pair: ops per round | the loop's own | the rule's decision (searches "
        "as on a GPU: `mentored.searching_as`) | host reads, per engine\n\n"
    )
    md += "| rule | " + " | ".join(f"{e} ops | {e}: loop's own | {e}: rule | {e}: reads" for e in engines) + " |\n"
    md += "|---|" + "---|---|---|---|" * len(engines) + "\n" + "\n".join(per_rule) + "\n"
    write_results(
        args.out, md, {"rows": rows}, "python scripts/bench_launch.py" + (" small=true" if args.small else "")
    )


if __name__ == "__main__":
    main()
