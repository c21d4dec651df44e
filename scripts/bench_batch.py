"""Batched decoding on a CPU: items/s at batch size B vs 1 for each engine, on the embedded pair and the
demo's settings (arith prompts, SpS, m = 4, T = 0.6, 48 new tokens), same items and seeds; repeats
interleaved (B = 1 then B, each repeat) so machine noise hits both alike, the ratio given with its range.
"""

from __future__ import annotations

import time

import torch

from cactus_bench.core.cli import Command, Key
from cactus_bench.core.decode import Engine, EngineOptions, Job, Warper
from cactus_bench.core.rules import build_rule
from cactus_bench.tools.perf.results import spread, write_results
from cactus_bench.tools.perf.shapes import PAIRS

ENGINES = {"eager": None, "fast": "inductor"}


def embedded_prompts(n: int):
    from cactus_bench.adapters.embedded import arith
    from cactus_bench.adapters.embedded.install import ensure_pair
    from cactus_bench.backends.hf.loader import load_pair

    folder = ensure_pair()
    pair = load_pair(str(folder / "drafter"), str(folder / "verifier"), dtype="float32", device="cpu")
    texts = [
        pair.apply_chat_template([{"role": "user", "content": it.question}]) for it in arith.generate("test", n, 0)
    ]
    prompts = [pair.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    return pair.drafter, pair.verifier, prompts, set(pair.eos_token_id), pair.vocab_size


def tiny_prompts(n: int):
    drafter, verifier = PAIRS["tiny"]()
    g = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(0, 512, (int(torch.randint(20, 60, (1,), generator=g)),), generator=g).tolist() for _ in range(n)
    ]
    return drafter, verifier, prompts, set(), None


def items_per_s(drafter, verifier, prompts, eos, vocab, rows: int, compile, new_tokens: int) -> tuple[float, list]:
    engine = Engine(
        verifier, drafter, build_rule("sps"), 4, Warper(0.6, 20, 0.95), vocab, eos, EngineOptions(rows, compile)
    )
    jobs = [Job(p, new_tokens, torch.Generator().manual_seed(i)) for i, p in enumerate(prompts)]
    start = time.perf_counter()
    outs = {id(job): out.tokens for job, out in engine.run(jobs)}
    return len(jobs) / (time.perf_counter() - start), [outs[id(j)] for j in jobs]


def main():
    command = Command(
        prog="python scripts/bench_batch.py",
        about=__doc__,
        keys=(
            Key("small", "a tiny random pair, eager only, 16 items (seconds)", False, bool),
            Key("batch", "rows decoded at once (compared with 1)", 16, int),
            Key("items", "arith items decoded", 64, int),
            Key("repeats", "interleaved repeats", 3, int),
            Key("new_tokens", "tokens per item", 48, int),
            Key("threads", "torch threads", 1, int),
            Key("out", "result files' path without suffix (.md, .json)", "results/bench/batch"),
        ),
    )
    args = command.parse()
    torch.set_num_threads(args.threads)
    drafter, verifier, prompts, eos, vocab = (tiny_prompts if args.small else embedded_prompts)(
        16 if args.small else args.items
    )
    engines = {"eager": None} if args.small else ENGINES
    lines = [
        f"# Batched decoding: items/s at B = {args.batch} vs B = 1 ({len(prompts)} items, {args.repeats} repeats, "
        f"{args.threads} thread(s))",
        "",
        f"| engine | items/s B=1 | items/s B={args.batch} | ratio (median, range) | same tokens |",
        "|---|---|---|---|---|",
    ]
    results = {}
    for name, compile in engines.items():
        for rows in (1, args.batch):  # warm-up: every shape and key bucket this batch size meets (compiles)
            items_per_s(drafter, verifier, prompts, eos, vocab, rows, compile, args.new_tokens)
        one, many, same = [], [], True
        for _ in range(args.repeats):
            a, ta = items_per_s(drafter, verifier, prompts, eos, vocab, 1, compile, args.new_tokens)
            b, tb = items_per_s(drafter, verifier, prompts, eos, vocab, args.batch, compile, args.new_tokens)
            one.append(a)
            many.append(b)
            same = same and ta == tb
        ratios = [b / a for a, b in zip(one, many)]
        results[name] = {"items_per_s_1": one, "items_per_s_batch": many, "ratios": ratios, "same_tokens": same}
        lines.append(
            f"| {name} | {sum(one) / len(one):.1f} | {sum(many) / len(many):.1f} | {spread(ratios)} | {same} |"
        )
        print(lines[-1], flush=True)
    write_results(args.out, "\n".join(lines), {"args": vars(args), "results": results}, command.command_line(args))


if __name__ == "__main__":
    main()
