"""The vLLM tier's fixtures (`make test-vllm`, in `.venv-vllm`): one torch thread and vLLM's CPU kernels for
every test here, the SmolLM2 pair, and runs through the app into one results folder. Its two files run in
two pytest-xdist workers, each starting the engines it needs once."""

import json

import pytest
import torch

from cactus_bench.adapters.embedded.smollm2 import ensure_smollm2
from cactus_bench.app import run as run_mod
from cactus_bench.app.compose import compose
from cactus_bench.backends.hf.loader import load_pair
from cactus_bench.backends.vllm import decoder as vdecoder
from cactus_bench.backends.vllm import plugin

from .engines import BASE


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    from vllm.platforms import current_platform

    current_platform.import_kernels()  # what an engine does first: the CPU build's kernels, for tests
    current_platform.register_triton_kernel_overrides()  # that call vLLM's own sampler outside one
    plugin.register()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    vdecoder._ENGINES.clear()
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folder():
    return ensure_smollm2(log=lambda s: None)


@pytest.fixture(scope="module")
def pair(folder):
    return load_pair(str(folder / "drafter"), str(folder / "verifier"), dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    results = tmp_path_factory.mktemp("vllm") / "runs"

    def run(*overrides, base=BASE):
        cfg = compose((*base, *overrides, f"paths.runs={results}"))
        summary = run_mod.run(cfg)
        folder = next(results.glob(f"{cfg.data.name}/*/*_{summary['run_key']}"))
        samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
        return summary, sorted(samples, key=lambda s: s["index"])

    run.results = results
    return run
