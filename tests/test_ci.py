"""CI's tier runner (.ci/tiers.py): one line per tier with its time and test counts, a failure's paragraph
naming the tier, and a run that outgrows its limit fails naming its slowest tiers."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIERS = ROOT / ".ci" / "tiers.py"


def tiers(*args, folder, **env):
    return subprocess.run(
        [sys.executable, str(TIERS), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "CI_TIERS_DIR": str(folder), **env},
        cwd=folder,
    )


def record(folder: Path, name: str, start: float, seconds: float, **extra) -> None:
    data = {"name": name, "command": f"make {name}", "start": start, "end": start + seconds, "seconds": seconds}
    data.update({"status": 0, "counts": {"passed": 10}, "background": False, "log": f"{name}.log", **extra})
    (folder / f"{name}.json").write_text(json.dumps(data))


def test_a_tier_prints_its_time_and_the_test_counts_of_every_pytest_session_it_ran(tmp_path):
    script = (
        "print('905 passed, 8 skipped in 253.59s (0:04:13)'); "
        "print('==== 2 failed, 16 passed, 1 error in 9.1s ===='); print('12 passed in the text, not a summary')"
    )
    done = tiers("run", "unit", "--", sys.executable, "-c", script, folder=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "905 passed, 8 skipped in 253.59s" in done.stdout  # the tier's own output is shown
    line = done.stdout.splitlines()[-1]
    assert line.startswith("tier unit") and "ok" in line
    assert "921 passed, 8 skipped, 2 failed, 1 errors" in line  # both sessions summed; the prose line ignored
    saved = json.loads((tmp_path / "unit.json").read_text())
    assert saved["counts"] == {"passed": 921, "skipped": 8, "failed": 2, "errors": 1} and saved["status"] == 0


def test_a_failing_tier_says_which_in_one_paragraph_and_passes_its_status_on(tmp_path):
    script = "import sys; print('lots of output'); print('E   AssertionError: the real reason'); sys.exit(3)"
    done = tiers("run", "test-slow", "--", sys.executable, "-c", script, folder=tmp_path)
    assert done.returncode == 3
    assert "FAILED (exit 3)" in done.stdout.splitlines()[-1]
    said = done.stderr
    assert "CI failed in tier 'test-slow'" in said and "exited with status 3" in said
    assert "AssertionError: the real reason" in said and str(tmp_path / "test-slow.log") in said
    background = tiers("log", "venv", "--", sys.executable, "-c", "print('quiet')", folder=tmp_path)
    assert "quiet" not in background.stdout and "(in the background)" in background.stdout  # output: its log
    assert (tmp_path / "venv.log").read_text() == "quiet\n"


def test_the_report_fails_past_the_limit_naming_the_slowest_tiers(tmp_path):
    record(tmp_path, "install", 0, 120)
    record(tmp_path, "test", 120, 900)
    record(tmp_path, "test-slow", 1020, 1500)
    record(tmp_path, "test-vllm", 2520, 1200)
    record(tmp_path, "venv-vllm", 10, 400, background=True)
    over = tiers("report", folder=tmp_path)
    assert over.returncode == 1
    assert "total 62m00s wall" in over.stdout and "50 tests passed" in over.stdout
    assert "over its 60m00s limit" in over.stderr
    assert "the slowest tiers were test-slow (25m00s), test-vllm (20m00s), test (15m00s)" in over.stderr
    within = tiers("report", folder=tmp_path, CI_LIMIT_S="4000")  # the control: the same tiers, a higher limit
    assert within.returncode == 0 and not within.stderr
    record(tmp_path, "lint", 100, 10, status=1)
    assert tiers("report", folder=tmp_path, CI_LIMIT_S="4000").returncode == 1  # a failed tier fails the report


def test_no_tier_forces_a_kernel_level_some_cpu_lacks():
    """CI lands on AVX2-only, AVX-512 and AMX machines: a kernel level above AVX2 (which every one has) is
    asked for only through `tests/helpers/kernels.py`, which offers the levels this CPU has. (A test that
    forced ATEN_CPU_CAPABILITY=avx512 died of SIGILL on an AVX2-only EPYC.)"""
    import re

    root = Path(__file__).resolve().parents[1]
    forced = re.compile(r"""(ATEN_CPU_CAPABILITY|NPY_DISABLE_CPU_FEATURES|MKL_ENABLE_INSTRUCTIONS|ONEDNN_MAX_CPU_ISA)"""
                        r"""["']?\s*[:=]\s*["']?(\w+)""")  # fmt: skip
    found = []
    for path in [*root.glob("cactus_bench/**/*.py"), *root.glob("tests/**/*.py"), *root.glob("scripts/*"),
                 root / "Makefile", *root.glob(".ci/*")]:  # fmt: skip
        if path.is_file() and path.name != "kernels.py" and path != Path(__file__).resolve():
            for name, value in forced.findall(path.read_text(errors="replace")):
                if not (name == "ATEN_CPU_CAPABILITY" and value.lower() in ("default", "avx2")):
                    found.append(f"{path.relative_to(root)}: {name}={value}")
    assert not found, found


def test_the_kernel_levels_offered_are_those_the_cpu_has(monkeypatch):
    """On an AVX2-only CPU the AVX-512 level is skipped (and named), never forced."""
    from tests.helpers import kernels

    monkeypatch.setattr(kernels, "aten_level", lambda: "avx2")
    levels, skipped = kernels.kernel_levels()
    assert list(levels) == ["default", "avx2"] and skipped == ["avx512"]
    assert all(v["ATEN_CPU_CAPABILITY"] in ("default", "avx2") for v in levels.values())
