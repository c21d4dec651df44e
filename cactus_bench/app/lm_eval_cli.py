"""lm-eval's own command line with the `cactus` model registered and the project's tasks on its path:

    python -m cactus_bench.app.lm_eval_cli run --model cactus --tasks cactus_arith --apply_chat_template \
        --model_args pair=tiny,method=cactus,delta=0.75,m=10 --limit 20

Everything after the program name is lm-eval's (`python -m cactus_bench.app.lm_eval_cli --help`); `model_args` are
the run's settings (`cactus_bench.app.lm_eval`). The project's tasks (`cactus_gsm8k`, `cactus_gpqa_diamond`,
`cactus_arith`, ...) are on the task path unless `--include_path` names another folder.
"""

import sys

from lm_eval.__main__ import cli_evaluate

from cactus_bench.adapters.benchmarks.scoring import TASKS_DIR
from cactus_bench.app import lm_eval  # noqa: F401  (registers model "cactus")


def main(argv: list[str]) -> None:
    if "--include_path" not in argv and any(a in argv for a in ("run", "ls", "validate")):
        argv = [*argv, "--include_path", str(TASKS_DIR)]
        if "run" in argv and all(t.startswith(OURS) for t in requested_tasks(argv)):
            only_our_tasks()
    sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


OURS = "cactus_"  # the prefix of every task in benchmarks/tasks


def requested_tasks(argv: list[str]) -> list[str]:
    """The names given to --tasks (comma-separated); none when the flag is not there."""
    for flag in ("--tasks", "-t"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return argv[argv.index(flag) + 1].split(",")
    return []


def only_our_tasks() -> None:
    """A run of this project's tasks only: lm-eval indexes just their folder, not its ~14,700 bundled task
    files (about 20 s before the first item)."""
    from lm_eval.tasks import TaskManager

    index = TaskManager.__init__

    def ours(self, *args, **kwargs):
        index(self, *args, **{**kwargs, "include_defaults": False})

    TaskManager.__init__ = ours


if __name__ == "__main__":
    main(sys.argv[1:])
