"""Micro-benchmark: one `verify` call per rule, as the decode engine makes it (no value checks, realised KL
on), at B = 1, V = 151,936 (Qwen3), m ∈ {5, 10, 20}, beside one softmax over the same [1, m+1, V] tensor
(the floor a rule kernel is compared with)."""

import platform
from functools import partial

import torch

from cactus_bench.core.cli import Command, Key
from cactus_bench.core.rules import RULES, build_rule
from cactus_bench.tools.perf.results import median_time, write_results


def main():
    args = Command(
        prog="python scripts/bench_rules.py",
        about=__doc__,
        keys=(
            Key("vocab", "vocabulary size V", 151936, int),
            Key("m", "draft lengths, comma-separated", [5, 10, 20], list, item=int),
            Key("repeat", "timed calls per rule and m", 20, int),
            Key("device", "cpu or cuda", "cuda" if torch.cuda.is_available() else "cpu"),
            Key("out", "result files' path without suffix (.md, .json)", "results/bench/rules"),
            Key("small", "V = 4,096, m = 5, a few repeats (seconds)", False, bool),
        ),
    ).parse()
    if args.small:
        args.vocab, args.m, args.repeat = 4096, [5], 3
    device = torch.device(args.device)
    g = torch.Generator(device=device).manual_seed(0)
    rows = []
    for m in args.m:
        logits_p = torch.randn(1, m, args.vocab, device=device, generator=g)
        logits_q = torch.randn(1, m + 1, args.vocab, device=device, generator=g)
        p, q = logits_p.softmax(-1), logits_q.softmax(-1)
        d = torch.multinomial(p[0], 1, generator=g).T
        floor = median_time(lambda: logits_q.softmax(-1), device, args.repeat)
        rows.append({"rule": "softmax (floor)", "m": m, "ms": floor * 1e3, "x_softmax": 1.0})
        for name, params in ((n, v) for n in RULES.names() for v in RULES.get(n).timed_variants):
            rule = build_rule(name, **params)
            label = name + (f"[{','.join(map(str, params.values()))}]" if params else "")
            call = partial(rule.verify, p, q, d, g, check=False, return_kl=True, draft_raw=p, target_raw=q)
            t = median_time(call, device, args.repeat)
            rows.append({"rule": label, "m": m, "ms": t * 1e3, "x_softmax": t / floor})
    lines = [
        f"# verify() time per call, B=1, V={args.vocab}, {device.type} ({platform.processor() or 'cpu'}), "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads",
        "",
        "| rule | " + " | ".join(f"m={m} ms (x softmax)" for m in args.m) + " |",
        "|---|" + "---|" * len(args.m),
    ]
    for label in dict.fromkeys(r["rule"] for r in rows):
        cells = [f"{r['ms']:.2f} ({r['x_softmax']:.1f}x)" for r in rows if r["rule"] == label]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    write_results(
        args.out, table, {"rows": rows}, "python scripts/bench_rules.py" + (" small=true" if args.small else "")
    )


if __name__ == "__main__":
    main()
