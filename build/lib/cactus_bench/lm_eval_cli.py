"""lm-eval's own command line with the `cactus` model registered and the project's tasks on its path:

    python -m cactus_bench.lm_eval_cli run --model cactus \
        --model_args drafter=Qwen/Qwen3-0.6B,verifier=Qwen/Qwen3-8B,method=cactus,delta=0.75,m=10 \
        --tasks gsm8k --apply_chat_template

Everything after the program name is lm-eval's (`python -m cactus_bench.lm_eval_cli --help`). The project's
tasks (`cactus_gsm8k`, `cactus_gpqa_diamond`, ...) are found by adding
`--include_path <site-packages>/cactus_bench/benchmarks/tasks`.
"""

from lm_eval.__main__ import cli_evaluate

from .benchmarks import lm  # noqa: F401  (registers model "cactus")

if __name__ == "__main__":
    cli_evaluate()
