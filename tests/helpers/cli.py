"""Running a command-line entry point in this process (a subprocess re-imports torch: seconds each): its
exit status, stdout and stderr, with the environment, argv, logging and Hydra's global state restored."""

import contextlib
import io
import logging
import os
import sys
from dataclasses import dataclass


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_main(main, *args, env: dict | None = None, prog: str = "cactus_bench") -> Result:
    from hydra.core.global_hydra import GlobalHydra

    saved_env, saved_argv = dict(os.environ), sys.argv
    loggers = [logging.getLogger(), logging.getLogger("cactus_bench")]
    saved_log = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    out, err, code = io.StringIO(), io.StringIO(), 0
    os.environ.update(env or {})
    os.environ.pop("CACTUS_BENCH_DEBUG", None)
    sys.argv = [prog, *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            err.write(str(e.code))
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        for lg, handlers, level, propagate in saved_log:
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate = propagate
        GlobalHydra.instance().clear()
    return Result(code, out.getvalue(), err.getvalue())


def cli(*args, env=None):
    """`python -m cactus_bench ARGS`, in this process (what it prints and its exit status)."""
    from cactus_bench.__main__ import main

    return run_main(main, *args, env=env)


def one_paragraph(out) -> str:
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out.stderr
    return " ".join(out.stderr.split())


def score_cli(*args):
    from cactus_bench.tools.score import main

    return run_main(main, *args, prog="cactus_bench.tools.score")
