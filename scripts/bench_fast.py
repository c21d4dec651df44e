"""Fast path vs eager path on this CPU: same pair (the >= 20 ms verifier of bench_speed), same prompts and
seeds, tokens/s ratio, token equality; compile time reported separately (paid once per shape)."""

import argparse
import json
import time

import torch
from bench_speed import PAIRS

from cactus_bench.decode import autoregressive_generate, speculative_generate
from cactus_bench.utils import environment_info, write_text_atomic

PATHS = {"eager": {}, "static": {"static_cache": True}, "fast": {"static_cache": True, "compile": True}}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pair", default="cpu50m", choices=list(PAIRS))
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--m", type=int, default=5)
    ap.add_argument("--out", default="results/bench/fast")
    args = ap.parse_args()
    drafter, verifier = PAIRS[args.pair]()
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, verifier.config.vocab_size, (128,), generator=g).tolist() for _ in range(args.prompts)]
    sampling = {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
    # warm-up (and compile) on the first prompt, every path, both loops
    compile_s = {}
    for name, kw in PATHS.items():
        t = time.perf_counter()
        for _ in range(2):  # the second call settles recompiles for the bonus/rollback shapes
            speculative_generate(
                drafter,
                verifier,
                prompts[0],
                rule="sps",
                m=args.m,
                max_new_tokens=args.new_tokens,
                generator=torch.Generator().manual_seed(0),
                **sampling,
                **kw,
            )
            autoregressive_generate(
                verifier,
                prompts[0],
                max_new_tokens=args.new_tokens,
                generator=torch.Generator().manual_seed(0),
                **sampling,
                **kw,
            )
        compile_s[name] = time.perf_counter() - t
    rows = {name: {"sps_tokens": 0, "sps_time": 0.0, "ar_tokens": 0, "ar_time": 0.0, "tokens": []} for name in PATHS}
    for i, ids in enumerate(prompts):
        for name, kw in PATHS.items():  # interleaved: machine noise hits every path alike
            s = speculative_generate(
                drafter,
                verifier,
                ids,
                rule="sps",
                m=args.m,
                max_new_tokens=args.new_tokens,
                generator=torch.Generator().manual_seed(i),
                **sampling,
                **kw,
            )
            a = autoregressive_generate(
                verifier,
                ids,
                max_new_tokens=args.new_tokens,
                generator=torch.Generator().manual_seed(i),
                **sampling,
                **kw,
            )
            r = rows[name]
            r["sps_tokens"] += len(s.tokens)
            r["sps_time"] += s.wall_time
            r["ar_tokens"] += len(a.tokens)
            r["ar_time"] += a.wall_time
            r["tokens"].append((s.tokens, a.tokens))
    lines = [
        f"# Fast path vs eager on this CPU ({args.pair}, m={args.m}, T=0.6, {args.prompts} prompts x "
        f"{args.new_tokens} tokens)",
        "",
        "| path | SpS tok/s | x eager | AR tok/s | x eager | same tokens as eager | warm-up/compile s |",
        "|---|---|---|---|---|---|---|",
    ]
    base = rows["eager"]
    result = {}
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
    env = environment_info()
    lines += [
        "",
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, load avg "
        f"{env['hardware'].get('load_avg')}; command: `make bench-fast`",
    ]
    print("\n".join(lines))
    write_text_atomic(args.out + ".md", "\n".join(lines) + "\n")
    write_text_atomic(args.out + ".json", json.dumps({"args": vars(args), "env": env, "results": result}, indent=1))


if __name__ == "__main__":
    main()
