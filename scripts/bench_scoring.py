"""Scoring speed: seconds per GPQA reply (lm-eval's extraction chains, the authors' thinking filter), for long
thinking-mode replies (about 4,000 tokens), with the harness's fixes and with lm-eval's stock helpers in the
same run (the stock rebuilds its punctuation table on every call).
"""

import builtins
import random
import statistics
import time

from cactus_bench.adapters.benchmarks import filters
from cactus_bench.core.cli import Command, Key
from cactus_bench.tools.perf.results import write_results
from cactus_bench.tools.score import scorer_for


def replies(scorer, n: int, words: int) -> list[tuple[int, str]]:
    rng = random.Random(0)
    vocab = "so the reaction proceeds through an intermediate where the charge sits on oxygen and then".split()
    out = []
    for prompt in scorer.prompts(n):
        body = " ".join(rng.choice(vocab) for _ in range(words))
        out.append((prompt.index, f"<think>{body}</think>\n\nThe answer is {prompt.doc['answer']}"))
    return out


def per_reply(scorer, todo) -> list[float]:
    times = []
    for index, text in todo:
        t = time.perf_counter()
        scorer.score(index, text)
        times.append(time.perf_counter() - t)
    return times


def main():
    args = Command(
        prog="python scripts/bench_scoring.py",
        about=__doc__,
        keys=(
            Key("replies", "GPQA replies scored", 20, int),
            Key("words", "words per reply", 3000, int),
            Key("small", "3 replies", False, bool),
            Key("out", "result files' path without suffix (.md, .json)", "results/bench/scoring"),
        ),
    ).parse()
    if args.small:
        args.replies = 3
    scorer = scorer_for("gpqa")
    todo = replies(scorer, args.replies, args.words)
    fixed = per_reply(scorer, todo)
    filters.extraction.range = builtins.range  # lm-eval's stock helper, for the comparison
    try:
        stock = per_reply(scorer, todo)
    finally:
        filters.extraction.range = filters._range
    lines = [
        f"# Scoring speed: GPQA, {len(todo)} replies of ~{args.words} words with thinking",
        "",
        "| helpers | median s/reply | max s/reply |",
        "|---|---|---|",
        f"| ours (table built once) | {statistics.median(fixed):.4f} | {max(fixed):.4f} |",
        f"| lm-eval 0.4.13 stock (table per call) | {statistics.median(stock):.4f} | {max(stock):.4f} |",
    ]
    print("\n".join(lines))
    data = {"ours_s": fixed, "stock_s": stock, "args": vars(args)}
    write_results(
        args.out, "\n".join(lines), data, "python scripts/bench_scoring.py" + (" small=true" if args.small else "")
    )


if __name__ == "__main__":
    main()
