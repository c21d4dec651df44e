"""One benchmark, every engine, one run: tokens/s of vLLM (engine=vllm), this project's eager and fast
engines, and transformers (`generate`; assisted generation for SpS) on the SmolLM2 pair, on this machine's
CPU, at batch size 1 and 16, for the verifier alone and SpS.

Interleaved: each repeat times every (engine, method, batch) once, in a shuffled order, so a load change
hits all alike; a figure is the median over repeats with its range, and each ratio is taken against
transformers' `generate` of the same repeat. Every decode emits exactly `new_tokens` tokens per prompt (no
EOS stop), from the paper's sampling (T 0.6, top-k 20, top-p 0.95), m = 4. Needs vLLM (`.venv-vllm`:
`make bench-engines`).
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import time

import torch

from cactus_bench.core.cli import Command, Key
from cactus_bench.tools.perf.results import spread, write_results
from cactus_bench.tools.perf.transformers_reference import assistant_setup, model_defaults_off, sampling

PROMPTS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many",
    "Write a short poem about the sea at night, with a line about the moon.",
    "Explain in two sentences why the sky is blue.",
    "List three tips for learning a new language quickly.",
]


def main():
    args = Command(
        prog="python scripts/bench_engines.py",
        about=__doc__,
        keys=(
            Key("repeats", "interleaved repeats", 3, int),
            Key("new_tokens", "tokens per prompt", 32, int),
            Key("m", "draft length", 4, int),
            Key("batch", "the batched case's rows", 16, int),
            Key("no_fast", "leave out the fast engine (compiling costs minutes)", False, bool),
            Key("small", "one repeat, 4 tokens, B=2, no fast engine (seconds)", False, bool),
            Key("out", "result files' path without suffix (.md, .json); default: print only", None),
        ),
    ).parse()
    if args.small:
        args.repeats, args.new_tokens, args.batch, args.no_fast = 1, 4, 2, True
    torch.set_num_threads(1)  # before vLLM binds its threads: every engine on one thread

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from cactus_bench.adapters.embedded.smollm2 import ensure_smollm2
    from cactus_bench.backends.hf.loader import load_pair
    from cactus_bench.backends.vllm import plugin
    from cactus_bench.backends.vllm.decoder import NEUTRAL_SAMPLING, NO_MODEL_DEFAULTS
    from cactus_bench.core.decode.engine import Engine, EngineOptions, Job
    from cactus_bench.core.decode.warp import Warper
    from cactus_bench.core.rules import build_rule

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    folder = ensure_smollm2(log=print)
    pair = load_pair(str(folder / "drafter"), str(folder / "verifier"), dtype="float32", device="cpu")
    tok = pair.tokenizer
    ids = [tok(p)["input_ids"] for p in PROMPTS]
    n, m, T, K, P = args.new_tokens, args.m, 0.6, 20, 0.95
    common = dict(
        model=str(folder / "verifier"),
        dtype="float32",
        enforce_eager=True,
        max_model_len=512,
        seed=0,
        max_num_seqs=args.batch,
        async_scheduling=False,
        kv_cache_memory_bytes=2**29,
        generation_config=NO_MODEL_DEFAULTS,  # the requests' sampling only, as the backend decodes
    )
    start = time.perf_counter()
    vllm_sps = LLM(
        **common,
        speculative_config={
            "method": "draft_model",
            "model": str(folder / "drafter"),
            "num_speculative_tokens": m,
            "draft_sample_method": "probabilistic",
        },
    )
    vllm_ar = LLM(**common)
    print(f"vLLM engines started in {time.perf_counter() - start:.0f}s; torch threads {torch.get_num_threads()}")

    def vllm_run(llm, spec: bool):
        def go(batch: list[list[int]], seed: int):
            params = []
            for i in range(len(batch)):
                extra = plugin.request_settings("sps", {}, "verifier", f"b{seed}-{i}") if spec else None
                params.append(
                    SamplingParams(
                        temperature=T,
                        top_k=K,
                        top_p=P,
                        max_tokens=n,
                        min_tokens=n,
                        ignore_eos=True,
                        **NEUTRAL_SAMPLING,
                        seed=seed + i,
                        extra_args=extra,
                    )
                )
            llm.generate([TokensPrompt(prompt_token_ids=x) for x in batch], params, use_tqdm=False)
            if spec:
                llm.collective_rpc(plugin.take_rounds, args=([f"b{seed}-{i}" for i in range(len(batch))],))

        return go

    engines = {}

    def ours(spec: bool, fast: bool, rows: int):
        key = (spec, fast, rows)
        if key not in engines:
            engines[key] = Engine(
                pair.verifier,
                pair.drafter if spec else None,
                build_rule("sps") if spec else None,
                m if spec else 0,
                Warper(T, K, P),
                pair.vocab_size,
                set(),
                EngineOptions(batch_size=rows, compile="inductor" if fast else None),
            )

        def go(batch, seed):
            jobs = [Job(list(x), n, torch.Generator().manual_seed(seed + i)) for i, x in enumerate(batch)]
            list(engines[key].run(jobs))

        return go

    # transformers' sampling, as every engine here samples: exactly n tokens, no EOS stop; an assistant warps
    # its logits once and drafts exactly m tokens a round (`transformers_reference`)
    sampled = sampling(T, K, P, n)

    def hf(spec: bool):
        assistant = {"assistant_model": pair.drafter} if spec else {}

        def go(batch, seed):
            for i, x in enumerate(batch):  # transformers' assisted generation takes one sequence at a time
                torch.manual_seed(seed + i)
                drafting = assistant_setup(pair.drafter, m) if spec else contextlib.nullcontext()
                with model_defaults_off(pair.verifier, pair.drafter), drafting, torch.inference_mode():
                    pair.verifier.generate(torch.tensor([x]), **sampled, **assistant)

        return go

    def hf_batched(batch, seed):
        width = max(len(x) for x in batch)
        input_ids = torch.tensor([[0] * (width - len(x)) + x for x in batch])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in batch])
        torch.manual_seed(seed)
        with model_defaults_off(pair.verifier), torch.inference_mode():
            pair.verifier.generate(input_ids, attention_mask=mask, **sampled)

    cases = {}
    for method, spec in (("verifier alone", False), ("SpS", True)):
        for rows in (1, args.batch):
            batch_note = f"B={rows}"
            cases[("vLLM", method, batch_note)] = vllm_run(vllm_sps if spec else vllm_ar, spec)
            cases[("ours eager", method, batch_note)] = ours(spec, False, rows)
            if not args.no_fast:
                cases[("ours fast", method, batch_note)] = ours(spec, True, rows)
            if rows == 1:
                cases[("transformers", method, batch_note)] = hf(spec)
            elif not spec:
                cases[("transformers", method, batch_note)] = hf_batched

    def workload(rows: int) -> list[list[list[int]]]:
        """B=1: each prompt alone, one after another; B=16: the prompts repeated to 16 rows, at once."""
        if rows == 1:
            return [[x] for x in ids]
        return [[ids[i % len(ids)] for i in range(rows)]]

    # warm-up, outside the timings: the whole workload once, so every shape the repeats meet (each prompt's
    # length bucket) is compiled and cached first
    for case, go in cases.items():
        for j, batch in enumerate(workload(1 if case[2] == "B=1" else args.batch)):
            go(batch, 999 + j)
        print(f"warmed up: {' / '.join(case)}", flush=True)
    rng = random.Random(0)
    rates: dict[tuple, list[float]] = {c: [] for c in cases}
    for r in range(args.repeats):
        order = list(cases)
        rng.shuffle(order)
        for case in order:
            rows = 1 if case[2] == "B=1" else args.batch
            batches = workload(rows)
            t = time.perf_counter()
            for j, batch in enumerate(batches):
                cases[case](batch, 1000 * r + 100 * j)
            tokens = n * sum(len(b) for b in batches)
            rates[case].append(tokens / (time.perf_counter() - t))
        print(f"repeat {r + 1}/{args.repeats} done", flush=True)

    lines = [
        "| engine | method | batch | tokens/s (median, range) | vs transformers `generate` (same repeat) |",
        "| --- | --- | --- | --- | --- |",
    ]
    data = {}
    for case, values in rates.items():
        engine_name, method, batch = case
        ref = rates.get(("transformers", "verifier alone", batch)) or rates[("transformers", "verifier alone", "B=1")]
        ratio = spread([v / b for v, b in zip(values, ref)])
        lines.append(
            f"| {engine_name} | {method} | {batch} | {statistics.median(values):.1f} "
            f"({min(values):.1f}-{max(values):.1f}) | {ratio} |"
        )
        data[" / ".join(case)] = values
    table = "\n".join(lines)
    print(table)
    if args.out:
        header = (
            f"# Every engine on the SmolLM2 pair (CPU, one thread)\n\n{len(PROMPTS)} prompts x {n} tokens, "
            f"m = {m}, T {T}, top-k {K}, top-p {P}, {args.repeats} interleaved repeats; B={args.batch}: "
            f"the prompts repeated to {args.batch} rows decoded at once (transformers' assisted generation "
            "takes one row).\n\n"
        )
        write_results(
            args.out,
            header + table,
            {"tokens_per_s": data, "new_tokens": n, "m": m},
            "python scripts/bench_engines.py"
            + (" small=true" if args.small else " no_fast=true" if args.no_fast else ""),
        )


if __name__ == "__main__":
    main()
