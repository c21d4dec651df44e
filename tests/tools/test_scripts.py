"""Every benchmark script runs in its small=true mode and writes its result files (so none can silently rot).
Scripts that need vLLM run in the vLLM tier (`make test-vllm`), in its venv."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def needs_vllm(path: Path) -> bool:
    return any(line.lstrip().startswith(("from vllm", "import vllm")) for line in path.read_text().splitlines())


SCRIPTS = [
    pytest.param(p.stem, marks=[pytest.mark.vllm] if needs_vllm(p) else [])
    for p in sorted((ROOT / "scripts").glob("*.py"))
]


@pytest.mark.slow  # each script builds its models and times them: about a minute together
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_runs_small(script, tmp_path):
    out = tmp_path / script
    done = subprocess.run(
        [sys.executable, f"scripts/{script}.py", "small=true", f"out={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    assert data and out.with_suffix(".md").read_text().startswith("# ")


def test_a_commit_is_dirty_when_code_differs_not_when_results_were_written(tmp_path):
    """Benchmarks rewrite `results/` (a chain of them rewrites the next one's inputs to nothing it measures):
    that leaves the commit they name clean; a changed source file does not."""
    import subprocess

    from cactus_bench.core.utils import git_commit

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True)

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "speed.md").write_text("before\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "c")
    clean = git_commit(tmp_path)
    assert clean and len(clean) == 40
    (tmp_path / "results" / "speed.md").write_text("after\n")
    assert git_commit(tmp_path / "results") == clean  # asked from any folder of the checkout
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == clean + "-dirty"


def test_result_files_name_the_commit_the_cpu_and_its_kernel_level(tmp_path):
    """A speed figure is a property of a commit on a CPU: AMD and Intel differ in kernels, and ATen picks a
    kernel level (AVX2, AVX512) per machine; both files say which."""
    import torch

    from cactus_bench.core.utils import cpu_model, git_commit
    from cactus_bench.tools.perf.results import write_results

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8488C\nflags\t\t: avx2\n")
    assert cpu_model(str(cpuinfo)) == "Intel(R) Xeon(R) Platinum 8488C"
    assert cpu_model(str(tmp_path / "none")) is None
    write_results(tmp_path / "r", "# t\n", {"x": 1}, "cmd")
    level = torch.backends.cpu.get_cpu_capability()
    footer = (tmp_path / "r.md").read_text().splitlines()[-1]
    assert f"commit {git_commit()}" in footer and f"({level})" in footer, footer
    hw = json.loads((tmp_path / "r.json").read_text())["env"]["hardware"]
    assert hw["cpu_capability"] == level and "cpu_model" in hw


def test_the_device_check_fits_its_window_section_by_section(tmp_path, monkeypatch):
    """Under a deadline too short for everything: each section either finished (or failed, its traceback
    saved, and the check went on) or was skipped with its reason; both result files hold every section
    that ran as soon as it ended; the cost model is saved right after the rounds. The check reads a clock
    that ticks once per reading, so which sections fit depends on the code, not on the machine's load."""
    import torch

    from cactus_bench.tools.perf import device_check as dc

    torch.set_num_threads(1)
    snapshots = []
    real_save = dc.Check.save

    def save(self, section, value):
        real_save(self, section, value)
        snapshots.append((section, section in json.loads(self.out.with_suffix(".json").read_text())))

    def broken(self):
        raise RuntimeError("a section that fails")

    class Clock:  # the check's clock: each reading 0.1 s after the last, whatever the machine's load
        t = 0.0

        @classmethod
        def perf_counter(cls):
            cls.t += 0.1
            return cls.t

    monkeypatch.setattr(dc, "time", Clock)
    monkeypatch.setattr(dc.Check, "save", save)
    monkeypatch.setattr(dc.Check, "hidden_syncs", broken)  # cheap, and always inside the window
    out = tmp_path / "check"
    dc.main(["small=true", f"out={out}", "budget_s=40", "batches=1"])
    report = json.loads(out.with_suffix(".json").read_text())
    assert all(on_disk for _, on_disk in snapshots)
    order = [name for name, _ in snapshots if name != "skipped"]
    assert order[:3] == ["built_s", "ar_eager", "round_eager"]  # smoke and the fast engine: past the window
    assert order.index("cost_model") == 3
    planned = [
        "smoke",
        "ar_fast",
        "round_fast",
        "hidden_syncs",
        "ar_fast_long",
        "round_fast_long",
        "agreement",
        "batched",
        "rules_ms",
    ]
    for name in planned:
        ran = name in report
        skipped = [s for s in report["skipped"] if s.startswith(name + " ")]
        assert ran != bool(skipped), (name, report["skipped"])
        assert ran or "needs ~" in skipped[0]
    assert "smoke" not in report and "ar_fast" not in report  # the compile estimate kept them out
    assert report["failed"] == ["hidden_syncs"] and "a section that fails" in report["hidden_syncs"]["error"]
    assert "FAILED hidden_syncs" in out.with_suffix(".md").read_text()
