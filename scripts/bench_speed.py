"""Speed benchmark: our decode loops vs transformers' `generate`, side by side in one run.

For each pair, on the same prompts, m and sampling (interleaved per prompt, so machine noise hits all
methods alike):
  * our SpS loop vs `generate(assistant_model=drafter, do_sample=True)` made fair: the same law (each model
    warps its logits once; transformers as shipped warps the drafter's twice, hf_assistant=as_shipped) and
    exactly m drafts a round (`cactus_bench.tools.perf.transformers_reference`), so τ agrees and the ratio is the
    loops' speed;
  * our AR loop vs plain `generate(do_sample=True)`;
  * our loop's wall time vs the sum of its bare model forwards (the share of time outside the models), and
    the SpS ratio our loop would reach with no time outside them: the ceiling of any bookkeeping change,
    since both loops run the same model code;
  * each ratio per prompt as well (min-max: the run's spread on a shared machine);
  * with fast=true, also our fast path (static KV cache + torch.compile) against the same HF figures.
Prints a Markdown table and writes it (plus JSON with the environment) next to `out`.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from functools import partial

import torch

from cactus_bench.core.cli import Command, Key
from cactus_bench.core.decode import ForwardTimer, autoregressive_generate, speculative_generate
from cactus_bench.tools.perf import launch
from cactus_bench.tools.perf.results import write_results
from cactus_bench.tools.perf.shapes import PAIRS
from cactus_bench.tools.perf.transformers_reference import (
    ASSISTANT_WARPS,
    assistant_setup,
    model_defaults_off,
    sampling,
)


class ForwardMeter:
    """Counts a model's forward calls and the time spent inside them (for HF's loops)."""

    def __init__(self, *models):
        self.n, self.t, self._start = 0, 0.0, 0.0
        self.counted = models[0]
        self.handles = [
            h for m in models for h in (m.register_forward_pre_hook(self.pre), m.register_forward_hook(self.post))
        ]

    def pre(self, module, args):
        self._start = time.perf_counter()

    def post(self, module, args, out):
        self.t += time.perf_counter() - self._start
        self.n += module is self.counted

    def remove(self):
        for h in self.handles:
            h.remove()


SPLIT_LOOPS = {"hf_assisted": "HF assisted", "ours_sps": "ours eager", "ours_sps_fast": "ours fast"}


def round_split(run, ids, seed) -> dict:
    """One untimed run of `run` under torch's profiler: milliseconds per verifier call in each of the time
    parts (`launch.TIME_PARTS`) and in Python outside any op (the prefill's share included, as in the timed
    runs)."""
    split = launch.round_times(lambda: run(ids, seed)["rounds"])
    split.pop("compiled_calls")
    return split


def hf_generate(verifier, drafter, ids, args, seed):
    kw = sampling(args.temperature, args.top_k, args.top_p, args.new_tokens, assistant_warps=args.hf_assistant)
    drafting = contextlib.nullcontext()
    if drafter is not None:
        kw["assistant_model"] = drafter
        drafting = assistant_setup(drafter, args.m)
    torch.manual_seed(seed)
    meter = ForwardMeter(verifier, *([drafter] if drafter is not None else []))
    t = time.perf_counter()
    models = [verifier] if drafter is None else [verifier, drafter]
    with model_defaults_off(*models), drafting, torch.inference_mode():
        out = verifier.generate(torch.tensor([ids]), **kw)
    wall = time.perf_counter() - t
    meter.remove()
    new = out.shape[1] - len(ids)
    # assisted generation verifies its first drafts in the prompt's forward: verifier calls = rounds, as ours
    return {"tokens": new, "wall": wall, "tau": new / meter.n, "rounds": meter.n, "fwd_share": meter.t / wall}


def run_pair(name, args):
    drafter, verifier = PAIRS[name]()
    vocab = verifier.config.vocab_size
    g = torch.Generator().manual_seed(args.seed)
    prompts = [torch.randint(0, vocab, (args.prompt_len,), generator=g).tolist() for _ in range(args.prompts)]
    warping = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}

    def ours_sps(ids, seed, **engine_kw):
        timer = ForwardTimer()
        out = speculative_generate(
            drafter,
            verifier,
            ids,
            rule="sps",
            m=args.m,
            max_new_tokens=args.new_tokens,
            generator=torch.Generator().manual_seed(seed),
            forward_timer=timer,
            **warping,
            **engine_kw,
        )
        s = out.summary()
        # the timer skips the prefill; the prefill is (nearly all) forwards too
        return {
            "tokens": s["new_tokens"],
            "wall": out.wall_time,
            "tau": s["tau"],
            "rounds": s["verifier_calls"],
            "al": s["accepted_length"],
            "fwd_share": (timer.seconds + out.prefill_time) / out.wall_time,
        }

    def ours_ar(ids, seed, **engine_kw):
        out = autoregressive_generate(
            verifier,
            ids,
            max_new_tokens=args.new_tokens,
            generator=torch.Generator().manual_seed(seed),
            **warping,
            **engine_kw,
        )
        return {"tokens": len(out.tokens), "wall": out.wall_time, "tau": 1.0}

    methods = {
        "ours_sps": ours_sps,
        "hf_assisted": lambda ids, seed: hf_generate(verifier, drafter, ids, args, seed),
        "ours_ar": ours_ar,
        "hf_generate": lambda ids, seed: hf_generate(verifier, None, ids, args, seed),
    }
    if args.fast:
        methods["ours_sps_fast"] = partial(ours_sps, compile="inductor")
        methods["ours_ar_fast"] = partial(ours_ar, compile="inductor")
    rows = {k: [] for k in methods}
    for fn in methods.values():  # warm-up: allocator, kernels, HF's lazy setup, compiled graphs
        for _ in range(2):  # twice: the compiled bonus/rollback shapes settle on the second call
            fn(prompts[0], 0)
    for i, ids in enumerate(prompts):
        for key, fn in methods.items():
            rows[key].append(fn(ids, args.seed + i))

    # each SpS loop's round split into parts (profiled, untimed: the profiler slows every op), on one prompt
    with torch.profiler.profile():  # the profiler's first use sets itself up (tens of ms): not in a split
        torch.zeros(1)
    splits = {k: round_split(methods[k], prompts[0], args.seed) for k in SPLIT_LOOPS if k in methods}

    # the bare cost of one verifier forward over m+1 tokens at this context (for the record)
    with torch.inference_mode():
        x = torch.tensor([prompts[0]])
        t = time.perf_counter()
        for _ in range(3):
            verifier(x[:, : args.m + 1])
        verify_ms = (time.perf_counter() - t) / 3 * 1e3

    def agg(key):
        r = rows[key]
        toks, wall = sum(x["tokens"] for x in r), sum(x["wall"] for x in r)
        out = {"tokens_per_s": toks / wall, "tau": statistics.mean(x["tau"] for x in r)}
        for extra in ("al", "fwd_share"):
            if extra in r[0]:
                out[extra] = statistics.mean(x[extra] for x in r)
        return out

    def per_prompt(ours, hf):
        """The ratio on each prompt (timed back to back, so it shows the run's spread): (min, max)."""
        ratios = [o["tokens"] / o["wall"] / (h["tokens"] / h["wall"]) for o, h in zip(rows[ours], rows[hf])]
        return min(ratios), max(ratios)

    def seconds_per_round(key):
        return sum(x["wall"] for x in rows[key]) / sum(x["rounds"] for x in rows[key])

    def per_round(ours, hf):
        """HF's seconds per verifier call over ours: the loops' own speed, whatever τ each run drew (the two
        draw their acceptances from different random numbers: over 4 prompts their τ can differ by 15 % by
        chance, which the tokens/s ratio carries)."""
        return seconds_per_round(hf) / seconds_per_round(ours)

    res = {k: agg(k) for k in rows}

    def forward_bound(key):
        """The ratio to HF assisted if our loop spent no time outside the model forwards (eager: the same model
        code as transformers' own): the most any bookkeeping change can reach on this pair."""
        r = rows[key]
        return (
            sum(x["tokens"] for x in r)
            / sum(x["wall"] * x["fwd_share"] for x in r)
            / res["hf_assisted"]["tokens_per_s"]
        )

    result = {
        "pair": name,
        "verifier_params_M": sum(p.numel() for p in verifier.parameters()) / 1e6,
        "drafter_params_M": sum(p.numel() for p in drafter.parameters()) / 1e6,
        "verify_forward_ms": verify_ms,
        "methods": res,
        "sps_vs_hf_assisted": res["ours_sps"]["tokens_per_s"] / res["hf_assisted"]["tokens_per_s"],
        "sps_vs_hf_assisted_range": per_prompt("ours_sps", "hf_assisted"),
        "sps_vs_hf_assisted_forward_bound": forward_bound("ours_sps"),
        "sps_vs_hf_assisted_per_round": per_round("ours_sps", "hf_assisted"),
        "ar_vs_hf_generate": res["ours_ar"]["tokens_per_s"] / res["hf_generate"]["tokens_per_s"],
        "sps_vs_ours_ar": res["ours_sps"]["tokens_per_s"] / res["ours_ar"]["tokens_per_s"],
        "outside_forward_share": 1 - res["ours_sps"]["fwd_share"],
        "hf_assisted_outside_forward_share": 1 - res["hf_assisted"]["fwd_share"],
        "ms_per_round": {
            k: 1e3 * seconds_per_round(k) for k in ("hf_assisted", "ours_sps", "ours_sps_fast") if k in rows
        },
        "round_split_ms": splits,
        # the per-verifier-call ratio of a loop whose rounds were their GEMMs alone: no engine's ceiling is higher
        "gemm_bound_per_round": 1e3 * seconds_per_round("hf_assisted") / splits["hf_assisted"]["GEMMs"],
    }
    if args.fast:
        result["fast_sps_vs_hf_assisted"] = res["ours_sps_fast"]["tokens_per_s"] / res["hf_assisted"]["tokens_per_s"]
        result["fast_sps_vs_hf_assisted_range"] = per_prompt("ours_sps_fast", "hf_assisted")
        result["fast_sps_vs_hf_assisted_forward_bound"] = forward_bound("ours_sps_fast")
        result["fast_sps_vs_hf_assisted_per_round"] = per_round("ours_sps_fast", "hf_assisted")
        result["fast_ar_vs_hf_generate"] = res["ours_ar_fast"]["tokens_per_s"] / res["hf_generate"]["tokens_per_s"]
    return result


def main():
    args = Command(
        prog="python scripts/bench_speed.py",
        about=__doc__,
        keys=(
            Key("pairs", "pairs timed, comma-separated", list(PAIRS), list, item=str, choices=tuple(PAIRS)),
            Key("prompts", "prompts decoded per pair", 4, int),
            Key("prompt_len", "prompt tokens", 128, int),
            Key("new_tokens", "tokens per prompt", 64, int),
            Key("m", "draft length", 5, int),
            Key("temperature", "sampling temperature", 0.6, float),
            Key("top_k", "top-k (0: off)", 20, int),
            Key("top_p", "top-p", 0.95, float),
            Key("seed", "sampling seed", 0, int),
            Key(
                "hf_assistant",
                "transformers' assisted generation: same_law (each model warps once, as ours) or as_shipped "
                "(transformers 5.17-5.24 warp the drafter twice: a sharper p, lower τ)",
                "same_law",
                choices=ASSISTANT_WARPS,
            ),
            Key(
                "threads", "torch threads (pinned: the default threads of a shared machine collapse under load)", 1, int
            ),
            Key("fast", "also time our fast path (compiles: ~1 min per pair)", False, bool),
            Key("out", "result files' path without suffix (.md, .json)", "results/bench/speed"),
            Key("small", "the tiny pair, one prompt, 16 tokens, no fast path (seconds)", False, bool),
        ),
    ).parse()
    if args.small:
        args.pairs, args.prompts, args.new_tokens, args.prompt_len, args.fast = ["tiny"], 1, 16, 32, False
    if args.threads:
        torch.set_num_threads(args.threads)
    results = [run_pair(p, args) for p in args.pairs]
    lines = [
        f"# Decode speed, ours vs transformers (m={args.m}, T={args.temperature}, top-k={args.top_k}, "
        f"top-p={args.top_p}, {args.prompts} prompts x {args.new_tokens} new tokens, prompt {args.prompt_len})",
        "",
        "| pair | verify fwd ms | ours SpS tok/s | HF assisted tok/s | **SpS ratio** (per prompt) | "
        "bound: no time outside forwards | per verifier call (τ-free) | τ ours / HF | AL ours | "
        "ours AR tok/s | HF generate tok/s | **AR ratio** | SpS / AR | outside forwards ours / HF assisted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        m = r["methods"]
        lo, hi = r["sps_vs_hf_assisted_range"]
        lines.append(
            f"| {r['pair']} ({r['verifier_params_M']:.1f}M / {r['drafter_params_M']:.1f}M) | "
            f"{r['verify_forward_ms']:.1f} | {m['ours_sps']['tokens_per_s']:.1f} | "
            f"{m['hf_assisted']['tokens_per_s']:.1f} | **{r['sps_vs_hf_assisted']:.2f}x** ({lo:.2f}-{hi:.2f}) | "
            f"{r['sps_vs_hf_assisted_forward_bound']:.2f}x | {r['sps_vs_hf_assisted_per_round']:.2f}x | "
            f"{m['ours_sps']['tau']:.2f} / {m['hf_assisted']['tau']:.2f} | {m['ours_sps']['al']:.2f} | "
            f"{m['ours_ar']['tokens_per_s']:.1f} | {m['hf_generate']['tokens_per_s']:.1f} | "
            f"**{r['ar_vs_hf_generate']:.2f}x** | {r['sps_vs_ours_ar']:.2f}x | "
            f"{100 * r['outside_forward_share']:.1f}% / {100 * r['hf_assisted_outside_forward_share']:.1f}% |"
        )
    if args.fast:
        lines += [
            "",
            "Our fast path (static KV cache + torch.compile), same run, prompts and seeds:",
            "",
            "| pair | ours fast SpS tok/s | **vs HF assisted** (per prompt) | bound: no time outside forwards "
            "| per verifier call (τ-free) | ours fast AR tok/s | **vs HF generate** |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in results:
            m = r["methods"]
            lo, hi = r["fast_sps_vs_hf_assisted_range"]
            lines.append(
                f"| {r['pair']} | {m['ours_sps_fast']['tokens_per_s']:.1f} | "
                f"**{r['fast_sps_vs_hf_assisted']:.2f}x** ({lo:.2f}-{hi:.2f}) | "
                f"{r['fast_sps_vs_hf_assisted_forward_bound']:.2f}x | {r['fast_sps_vs_hf_assisted_per_round']:.2f}x | "
                f"{m['ours_ar_fast']['tokens_per_s']:.1f} | "
                f"**{r['fast_ar_vs_hf_generate']:.2f}x** |"
            )
    parts = [*launch.TIME_PARTS, launch.PYTHON]
    lines += [
        "",
        "Where a round's time goes (ms per verifier call: m drafts and one verify; one prompt profiled after the "
        "timed runs, so each op carries the profiler's ~1 µs): GEMMs and attention are the same kernels in every "
        "loop, compiled code and dynamo are what torch.compile runs per call (on a CPU, inductor's C++ wrapper "
        "runs most of the fast loop's GEMMs and attention inside its compiled code, where the profiler does not "
        "split them out: the fast rows' GEMMs and attention are a lower bound, their compiled code an upper "
        "one), other ops are the models' other "
        "eager ops and the loop's own, Python is the time no op holds. The ceiling is HF's timed round over its "
        "GEMMs: the per-call ratio no engine passes on this CPU.",
        "",
        "| pair | loop | round, timed | round, profiled | " + " | ".join(parts) + " | ceiling: HF / GEMMs |",
        "|---|---|---|---|" + "---|" * (len(parts) + 1),
    ]
    for r in results:
        for loop, split in r["round_split_ms"].items():
            ceiling = f"**{r['gemm_bound_per_round']:.2f}x**" if loop == "hf_assisted" else ""
            cells = " | ".join(f"{split[part]:.2f}" for part in parts)
            timed = r["ms_per_round"][loop]
            lines.append(
                f"| {r['pair']} | {SPLIT_LOOPS[loop]} | {timed:.2f} | {split['round']:.2f} | {cells} | {ceiling} |"
            )
    command = "python scripts/bench_speed.py" + (
        " small=true"
        if args.small
        else f" pairs={','.join(args.pairs)} m={args.m} temperature={args.temperature} top_k={args.top_k} "
        f"top_p={args.top_p} prompts={args.prompts} new_tokens={args.new_tokens}{' fast=true' if args.fast else ''}"
    )
    table = "\n".join(lines)
    print(table)
    write_results(args.out, table, {"args": vars(args), "results": results}, command)


if __name__ == "__main__":
    main()
