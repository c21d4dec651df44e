"""The device check (cactus_bench/tools/perf/device_check.py), runnable from a bare checkout on the GPU box, which
has torch and transformers but not this package installed: the repository root goes on the import path."""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
runpy.run_module("cactus_bench.tools.perf.device_check", run_name="__main__")
