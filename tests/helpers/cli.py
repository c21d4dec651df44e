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
