"""`cactus-bench <verb> [key=value ...]`: one command in front of every `python -m` entry point, which keep
working (`cactus-bench sweep X` is `python -m cactus_bench.tools.sweep X`, down to its `--help`)."""

from __future__ import annotations

import runpy
import sys

from cactus_bench.core.registry import unknown_name_message

VERBS = {  # verb -> (module run as __main__, what it does)
    "run": ("cactus_bench", "one run: a pair decodes a benchmark with one rule (Hydra overrides)"),
    "sweep": ("cactus_bench.tools.sweep", "a table's or figure's runs from a spec in sweeps/, resumable"),
    "report": ("cactus_bench.tools.report", "tables and figures from stored runs"),
    "plan": ("cactus_bench.tools.plan", "a sweep's cost and detectable differences, before it runs"),
    "score": ("cactus_bench.tools.score", "re-score stored replies with lm-eval, no models needed"),
    "runs": ("cactus_bench.tools.runs", "the stored runs, one row each"),
    "export": ("cactus_bench.tools.export", "stored runs in Spec-Bench's answer layout, for its own scripts"),
    "rules": ("cactus_bench.tools.rules", "the registered acceptance rules and their parameters"),
    "dashboard": ("cactus_bench.tools.dashboard", "the saved W&B workspace of the paper's figures"),
    "embedded": ("cactus_bench.adapters.embedded", "build (or check) the embedded offline pair"),
    "lm-eval": ("cactus_bench.app.lm_eval_cli", "lm-eval's own CLI with this project's model and tasks"),
    "device-check": ("cactus_bench.tools.perf.device_check", "the GPU device check (results/gpu/)"),
}


def usage() -> str:
    width = max(map(len, VERBS))
    lines = [f"  {verb:<{width}}  {what}" for verb, (_, what) in VERBS.items()]
    return "usage: cactus-bench VERB [key=value ...]   (VERB --help: its settings)\n\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return
    verb, rest = args[0], args[1:]
    if verb not in VERBS:
        sys.exit(f"cactus-bench: {unknown_name_message('verb', verb, VERBS)}.\n\n{usage()}")
    sys.argv = [f"cactus-bench {verb}", *rest]
    runpy.run_module(VERBS[verb][0], run_name="__main__", alter_sys=False)


if __name__ == "__main__":
    main()
