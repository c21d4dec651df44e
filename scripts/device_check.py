"""Device check: how fast the decode loop is on this machine, and how much of it is the loop's own overhead.

Needs only torch and transformers (the GPU box has nothing else) plus the project's core. Builds
random-initialised models with the real shapes of Qwen3-0.6B (drafter) and Qwen3-8B (verifier) in bf16
on CUDA — or, with --small, small shapes in fp32 on whatever device there is (for a CPU dry run) — and
measures:
  * AR ms/token and the memory bandwidth it achieves against the card's peak;
  * drafter step and verify(m+1) times for m in {5, 10, 20};
  * the rule kernels at V = 151,936;
  * one full speculative round vs the sum of its model forwards (overhead %), eager and fast paths;
  * eager vs fast token equality;
  * the speedup a cost model predicts at the paper's accepted lengths.
Writes <out>.json and <out>.md after every section, so a crash or a device time limit keeps what was
measured; the issue's targets (AR bandwidth, token equality, loop overhead) are measured first.

    python scripts/device_check.py --out results/gpu/h200              # on the GPU machine
    python scripts/device_check.py --out $OUT/h200                     # the lent device (files come back from $OUT)
    python scripts/device_check.py --small --out results/gpu/cpu_small  # CPU dry run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a bare checkout, no install

from cactus_bench.bench.models import SHAPES, qwen3_of_shape  # noqa: E402
from cactus_bench.decode import (  # noqa: E402
    CachedModel,
    ForwardTimer,
    autoregressive_generate,
    speculative_generate,
    static_cache_len,
)
from cactus_bench.rules import build_rule  # noqa: E402
from cactus_bench.utils import environment_info, write_text_atomic  # noqa: E402

PEAK_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}  # bytes/s, HBM
PAPER_AL = {20: {"SpS": 5.11, "Cactus δ=1": 7.00}, 10: {f"AL={a}": a for a in (2.0, 3.0, 4.0, 5.0, 6.0, 7.0)}}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_time(fn, device, repeat=10, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def forward_times(model, device, context: int, sizes: list[int], static: bool, compile: bool) -> dict[int, float]:
    """Bare forward time of n new tokens on top of a `context`-token cache, for each n."""
    out = {}
    prompt = torch.randint(0, model.config.vocab_size, (1, context), device=device)
    for n in sizes:
        # the cache-size bucket the decode loops use, so these compiled graphs are the ones they reuse
        state = CachedModel(
            model,
            device,
            static_cache_len(context + n + 1) if (static or compile) else None,
            frozenset({(n, n)}) if compile else frozenset(),
        )
        with torch.inference_mode():
            state.forward(prompt, keep=1, prefill=True)
            new = torch.randint(0, model.config.vocab_size, (1, n), device=device)

            def step():
                state.forward(new, keep=n)
                state.rollback(context)

            out[n] = median_time(step, device)
    return out


def round_overhead(drafter, verifier, device, prompt, m, new_tokens, **fast) -> dict:
    """Wall time of whole rounds vs the time inside model forwards (what the loop itself costs)."""
    kw = dict(rule="cactus", m=m, max_new_tokens=new_tokens, temperature=0.6, top_k=20, top_p=0.95, **fast)
    speculative_generate(drafter, verifier, prompt, generator=torch.Generator(device).manual_seed(0), **kw)  # warm
    timer = ForwardTimer(sync=True)
    out = speculative_generate(
        drafter, verifier, prompt, generator=torch.Generator(device).manual_seed(0), forward_timer=timer, **kw
    )
    rounds = out.wall_time - out.prefill_time
    return {
        "rounds": out.verifier_calls,
        "round_ms": 1e3 * rounds / out.verifier_calls,
        "forward_ms": 1e3 * timer.seconds / out.verifier_calls,
        "overhead_pct": 100 * (1 - timer.seconds / rounds),
        "tokens_per_s": len(out.tokens) / out.wall_time,
        "accepted_length": out.accepted_length,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="small fp32 shapes (CPU dry run)")
    ap.add_argument("--out", default="results/gpu/device_check")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--ar-tokens", type=int, default=64)
    ap.add_argument("--m", type=int, nargs="+", default=[5, 10, 20])
    ap.add_argument("--no-compile", action="store_true", help="skip the compiled fast path (static cache only)")
    args = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float32 if args.small else torch.bfloat16
    d_name, v_name = ("small-drafter", "small-verifier") if args.small else ("qwen3-0.6b", "qwen3-8b")
    v_shape = SHAPES[v_name]
    report = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "dtype": str(dtype),
        "drafter": d_name,
        "verifier": v_name,
        "context": args.context,
        "env": environment_info(),
    }
    log = lambda s: print(s, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    drafter = qwen3_of_shape(d_name, 0, dtype, device)
    verifier = qwen3_of_shape(v_name, 1, dtype, device)
    log(f"built {d_name} + {v_name} on {report['device']} in {time.perf_counter() - t0:.0f}s")
    fast = {"static_cache": True, "compile": not args.no_compile}
    prompt = torch.randint(0, v_shape["vocab_size"], (args.context,), generator=torch.Generator().manual_seed(0))
    prompt = prompt.tolist()

    out = Path(args.out)

    def save(section: str) -> None:
        """Write what is measured so far: a crash or the device's time limit later loses nothing."""
        report["seconds"] = time.perf_counter() - t0
        write_text_atomic(out.with_suffix(".json"), json.dumps(report, indent=1, default=str))
        write_text_atomic(out.with_suffix(".md"), markdown(report))
        log(f"[{report['seconds']:.0f}s] {section}: {json.dumps(report[section], default=str)}")

    # The targets first (AR bandwidth, eager = fast tokens, loop overhead), then the details.
    # 1. AR ms/token and bandwidth
    ar = {}
    for label, kw in (("eager", {}), ("fast", fast)):
        autoregressive_generate(
            verifier, prompt, max_new_tokens=8, generator=torch.Generator(device).manual_seed(0), **kw
        )
        out_ar = autoregressive_generate(
            verifier, prompt, max_new_tokens=args.ar_tokens, generator=torch.Generator(device).manual_seed(0), **kw
        )
        ms = 1e3 * (out_ar.wall_time - out_ar.prefill_time) / len(out_ar.tokens)
        ar[label] = {"ms_per_token": ms, "tokens": out_ar.tokens}
    param_bytes = sum(p.numel() * p.element_size() for p in verifier.parameters())
    kv_bytes = (
        2
        * v_shape["num_hidden_layers"]
        * v_shape["num_key_value_heads"]
        * v_shape["head_dim"]
        * args.context
        * torch.finfo(dtype).bits
        // 8
    )
    peak = next((v for k, v in PEAK_BANDWIDTH.items() if k in report["device"]), None)
    for row in ar.values():
        row["bandwidth_GBps"] = (param_bytes + kv_bytes) / (row["ms_per_token"] / 1e3) / 1e9
        row["bandwidth_pct_of_peak"] = 100 * row["bandwidth_GBps"] * 1e9 / peak if peak else None
    report["ar"] = {k: {x: y for x, y in v.items() if x != "tokens"} for k, v in ar.items()}
    report["ar"]["weights_GB"] = param_bytes / 1e9
    save("ar")

    # 2. eager vs fast token equality
    same = {}
    for temperature in (0.0, 0.6):
        toks = [
            speculative_generate(
                drafter,
                verifier,
                prompt,
                rule="cactus",
                m=args.m[0],
                max_new_tokens=48,
                temperature=temperature,
                top_k=20,
                top_p=0.95,
                generator=torch.Generator(device).manual_seed(1),
                **kw,
            ).tokens
            for kw in ({}, fast)
        ]
        same[f"T={temperature}"] = toks[0] == toks[1]
    same["ar_T=0.6"] = ar["eager"]["tokens"] == ar["fast"]["tokens"]
    report["eager_equals_fast"] = same
    save("eager_equals_fast")

    # 3. full round vs the sum of its forwards
    report["rounds"] = {}
    for m in args.m:
        report["rounds"][m] = {
            label: round_overhead(drafter, verifier, device, prompt, m, 4 * m, **kw)
            for label, kw in (("eager", {}), ("fast", fast))
        }
    save("rounds")

    # 4. drafter step and verify(m+1)
    sizes = sorted({1, 2, *[m + 1 for m in args.m]})
    report["forward_ms"] = {}
    for label, kw in (
        ("eager", {"static": False, "compile": False}),
        ("fast", {"static": True, "compile": fast["compile"]}),
    ):
        report["forward_ms"][label] = {
            "drafter_step": 1e3 * forward_times(drafter, device, args.context, [1], **kw)[1],
            "verify": {n - 1: 1e3 * t for n, t in forward_times(verifier, device, args.context, sizes, **kw).items()},
        }
    save("forward_ms")

    # 5. rule kernels at V = 151,936
    V = 151_936
    g = torch.Generator(device).manual_seed(0)
    report["rules_ms"] = {}
    for m in args.m:
        p = torch.softmax(torch.randn(1, m, V, device=device, generator=g), -1)
        q = torch.softmax(torch.randn(1, m + 1, V, device=device, generator=g), -1)
        d = torch.multinomial(p[0], 1, generator=g).T
        row = {"softmax": 1e3 * median_time(lambda: torch.softmax(q, -1), device)}
        for name in ("sps", "cactus", "tas", "topk"):
            rule = build_rule(name)
            row[name] = 1e3 * median_time(lambda: rule.verify(p, q, d, g, check=False, return_kl=True), device)
        report["rules_ms"][m] = row
    save("rules_ms")

    # 6. cost model: speedup = τ · t_ar / (m · t_draft + t_verify(m+1) + loop overhead)
    report["cost_model"] = {}
    for label in ("eager", "fast"):
        f = report["forward_ms"][label]
        t_ar = report["ar"][label]["ms_per_token"]
        for m, als in PAPER_AL.items():
            if m not in f["verify"]:
                continue
            r = report["rounds"].get(m, {}).get(label)
            extra = (r["round_ms"] - r["forward_ms"]) if r else 0.0
            round_ms = m * f["drafter_step"] + f["verify"][m] + extra
            report["cost_model"].setdefault(label, {})[m] = {
                name: (al + 1) * t_ar / round_ms for name, al in als.items()
            }
    save("cost_model")
    print(markdown(report))


def markdown(r: dict) -> str:
    """The report as Markdown tables; sections not measured yet (a partial save) are left out."""
    lines = [
        f"# Device check: {r['drafter']} + {r['verifier']} on {r['device']} ({r['dtype']}), context {r['context']}",
        "",
    ]
    if "ar" in r:
        lines += ["| AR (verifier alone) | ms/token | GB/s | % of peak |", "|---|---|---|---|"]
        for label in ("eager", "fast"):
            a = r["ar"][label]
            pct = f"{a['bandwidth_pct_of_peak']:.0f}%" if a["bandwidth_pct_of_peak"] else "–"
            lines.append(f"| {label} | {a['ms_per_token']:.2f} | {a['bandwidth_GBps']:.0f} | {pct} |")
    if "eager_equals_fast" in r:
        lines += ["", f"eager vs fast, same seed, same tokens: {r['eager_equals_fast']}"]
    if "rounds" in r:
        lines += [
            "",
            "| round (Cactus, T=0.6) | path | round ms | in forwards ms | outside forwards | tok/s |",
            "|---|---|---|---|---|---|",
        ]
        for m, paths in r["rounds"].items():
            for label, x in paths.items():
                lines.append(
                    f"| m={m} | {label} | {x['round_ms']:.2f} | {x['forward_ms']:.2f} | "
                    f"{x['overhead_pct']:.1f}% | {x['tokens_per_s']:.1f} |"
                )
    if "forward_ms" in r:
        verify_ms = r["forward_ms"]["eager"]["verify"]
        lines += [
            "",
            "| forwards (ms) | drafter step | " + " | ".join(f"verify m={m}" for m in verify_ms) + " |",
            "|---|---|" + "---|" * len(verify_ms),
        ]
        for label, f in r["forward_ms"].items():
            lines.append(
                f"| {label} | {f['drafter_step']:.2f} | " + " | ".join(f"{v:.2f}" for v in f["verify"].values()) + " |"
            )
    if "rules_ms" in r:
        names = list(next(iter(r["rules_ms"].values())))
        lines += ["", "| rule kernel ms (V=151,936) | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for m, row in r["rules_ms"].items():
            lines.append(f"| m={m} | " + " | ".join(f"{v:.3f}" for v in row.values()) + " |")
    if "cost_model" in r:
        lines += ["", "Predicted speedup over the verifier alone (cost model, measured forwards and loop overhead):"]
        for m in sorted({m for by_m in r["cost_model"].values() for m in by_m}):
            names = list(next(by_m[m] for by_m in r["cost_model"].values() if m in by_m))
            lines += ["", f"| m={m} | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
            for label, by_m in r["cost_model"].items():
                if m in by_m:
                    lines.append(f"| {label} | " + " | ".join(f"{by_m[m][n]:.2f}×" for n in names) + " |")
    lines.append(
        f"\n(took {r['seconds']:.0f}s; torch {r['env']['packages'].get('torch')}, "
        f"transformers {r['env']['packages'].get('transformers')})"
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
