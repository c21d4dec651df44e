"""Micro-benchmark: one `verify` call per rule, as the decode engine makes it (no value checks, realised KL
on), at B = 1, V = 151,936 (Qwen3), m ∈ {5, 10, 20}, beside one softmax over the same [1, m+1, V] tensor
(the floor a rule kernel is compared with)."""

import argparse
import platform
from functools import partial

import torch

from cactus_bench.perf.results import median_time, write_results
from cactus_bench.rules import build_rule

RULES = [
    ("sps", {}),
    ("cactus", {"delta": 1.0}),
    ("cactus_exact", {"delta": 1.0}),
    ("tas", {}),
    ("topk", {}),
    ("interp", {}),
    ("mentored", {}),
    ("speccas", {"variant": "token_v3"}),
    ("speccas", {"variant": "opt"}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--m", type=int, nargs="+", default=[5, 10, 20])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="results/bench/rules")
    ap.add_argument("--small", action="store_true", help="V = 4,096, m = 5, a few repeats (seconds)")
    args = ap.parse_args()
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
        for name, params in RULES:
            rule = build_rule(name, **params)
            label = name + (f"[{params['variant']}]" if "variant" in params else "")
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
    write_results(args.out, table, {"rows": rows}, "python scripts/bench_rules.py" + (" --small" if args.small else ""))


if __name__ == "__main__":
    main()
