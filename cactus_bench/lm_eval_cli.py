"""lm-eval's own command line with the `cactus` model registered and the project's tasks on its path:

    python -m cactus_bench.lm_eval_cli run --model cactus --tasks cactus_arith --apply_chat_template \
        --model_args pair=tiny,method=cactus,delta=0.75,m=10 --limit 20

Everything after the program name is lm-eval's (`python -m cactus_bench.lm_eval_cli --help`); `model_args` are
the run's settings (`cactus_bench.app.lm_eval`). The project's tasks (`cactus_gsm8k`, `cactus_gpqa_diamond`,
`cactus_arith`, ...) are on the task path unless `--include_path` names another folder.
"""

import sys

from lm_eval.__main__ import cli_evaluate

from .app import lm_eval  # noqa: F401  (registers model "cactus")
from .benchmarks.scoring import TASKS_DIR


def main(argv: list[str]) -> None:
    if "--include_path" not in argv and any(a in argv for a in ("run", "ls", "validate")):
        argv = [*argv, "--include_path", str(TASKS_DIR)]
    sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


if __name__ == "__main__":
    main(sys.argv[1:])
