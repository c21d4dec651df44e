"""Every benchmark script runs in its --small mode and writes its result files (so none can silently rot)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.stem for p in (ROOT / "scripts").glob("*.py"))


@pytest.mark.slow  # each script builds its models and times them: about a minute together
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_runs_small(script, tmp_path):
    out = tmp_path / script
    done = subprocess.run(
        [sys.executable, f"scripts/{script}.py", "--small", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    assert data and out.with_suffix(".md").read_text().startswith("# ")
