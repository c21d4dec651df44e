"""The fast engine (compiled forwards) vs eager on this CPU: the same pair (a >= 20 ms verifier), prompts and
seeds, tokens/s ratio and token equality; compile time reported separately (paid once per shape).
"""

import time

import torch

from cactus_bench.core.cli import Command, Key
from cactus_bench.core.decode import autoregressive_generate, speculative_generate
from cactus_bench.tools.perf.results import write_results
from cactus_bench.tools.perf.shapes import PAIRS

SAMPLING = {"temperature": 0.6, "top_k": 20, "top_p": 0.95}


def decode(drafter, verifier, prompt, seed, m, new_tokens, compile):
    kw = {"max_new_tokens": new_tokens, "compile": compile, **SAMPLING}
    s = speculative_generate(
        drafter, verifier, prompt, rule="sps", m=m, generator=torch.Generator().manual_seed(seed), **kw
    )
    a = autoregressive_generate(verifier, prompt, generator=torch.Generator().manual_seed(seed), **kw)
    return s, a


def main():
    args = Command(
        prog="python scripts/bench_fast.py",
        about=__doc__,
        keys=(
            Key("pair", "the pair timed", "cpu50m", choices=tuple(PAIRS)),
            Key("prompts", "prompts decoded", 3, int),
            Key("new_tokens", "tokens per prompt", 64, int),
            Key("m", "draft length", 5, int),
            Key("small", "the tiny pair, dynamo's eager backend (seconds)", False, bool),
            Key("out", "result files' path without suffix (.md, .json)", "results/bench/fast"),
        ),
    ).parse()
    paths = {"eager": None, "fast": "inductor"}
    if args.small:
        args.pair, args.prompts, args.new_tokens, paths = "tiny", 2, 16, {"eager": None, "traced": "eager"}
    drafter, verifier = PAIRS[args.pair]()
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, verifier.config.vocab_size, (128,), generator=g).tolist() for _ in range(args.prompts)]
    compile_s = {}
    for name, compile in paths.items():  # warm-up (and compile) on the first prompt, both loops
        t = time.perf_counter()
        decode(drafter, verifier, prompts[0], 0, args.m, args.new_tokens, compile)
        compile_s[name] = time.perf_counter() - t
    rows = {name: {"sps_tokens": 0, "sps_time": 0.0, "ar_tokens": 0, "ar_time": 0.0, "tokens": []} for name in paths}
    for i, ids in enumerate(prompts):
        for name, compile in paths.items():  # interleaved: machine noise hits every path alike
            s, a = decode(drafter, verifier, ids, i, args.m, args.new_tokens, compile)
            r = rows[name]
            r["sps_tokens"] += len(s.tokens)
            r["sps_time"] += s.wall_time
            r["ar_tokens"] += len(a.tokens)
            r["ar_time"] += a.wall_time
            r["tokens"].append((s.tokens, a.tokens))
    lines = [
        f"# Fast engine vs eager on this CPU ({args.pair}, m={args.m}, T=0.6, {args.prompts} prompts x "
        f"{args.new_tokens} tokens)",
        "",
        "| engine | SpS tok/s | x eager | AR tok/s | x eager | same tokens as eager | warm-up/compile s |",
        "|---|---|---|---|---|---|---|",
    ]
    base, result = rows["eager"], {}
    for name, r in rows.items():
        sps, ar = r["sps_tokens"] / r["sps_time"], r["ar_tokens"] / r["ar_time"]
        same = r["tokens"] == base["tokens"]
        result[name] = {
            "sps_tokens_per_s": sps,
            "ar_tokens_per_s": ar,
            "same_tokens": same,
            "warmup_s": compile_s[name],
        }
        lines.append(
            f"| {name} | {sps:.1f} | {sps / (base['sps_tokens'] / base['sps_time']):.2f}x | {ar:.1f} | "
            f"{ar / (base['ar_tokens'] / base['ar_time']):.2f}x | {same} | {compile_s[name]:.0f} |"
        )
    print("\n".join(lines))
    write_results(
        args.out,
        "\n".join(lines),
        {"args": vars(args), "results": result},
        "python scripts/bench_fast.py" + (" small=true" if args.small else ""),
    )


if __name__ == "__main__":
    main()
