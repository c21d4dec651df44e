"""What `plan` prices a backend's engines with on a GPU: the engine each `engine.name` runs there, that
engine's launch floor per layer (seconds a forward costs beyond its memory and compute time), and the seconds
to start it. A registry of its own, beside the backends rather than in them (a backend decodes; this is a
planning estimate); an outside backend adds its cost model through the `cactus_bench.costs` entry points."""

from __future__ import annotations

from dataclasses import dataclass, field

from cactus_bench.core.registry import Registry


@dataclass(frozen=True)
class CostModel:
    gpu_engine: dict[str, str]  # engine.name -> the engine it runs on a GPU
    launch_s_per_layer: dict[str, float]  # each GPU engine's launch floor per layer
    startup_s: dict[str, float] = field(default_factory=dict)  # seconds to start an engine, once per job
    # host time per forward call beyond its launches (the loop around it); unlisted: none known. Published
    # engines' are fitted to their measurements (tools/published.py): forwards alone predicted every one high
    host_s_per_forward: dict[str, float] = field(default_factory=dict)

    def engine_on_gpu(self, name: str) -> str:
        return self.gpu_engine.get(name, name)


def _check(name: str, model: CostModel) -> None:
    if not isinstance(model, CostModel):
        raise TypeError(f"cost model {name!r}: register a CostModel, not {type(model).__name__}")
    unpriced = sorted(set(model.gpu_engine.values()) - model.launch_s_per_layer.keys())
    if unpriced:
        raise ValueError(f"cost model {name!r}: GPU engine(s) {unpriced} have no launch_s_per_layer")


COSTS: Registry[CostModel] = Registry("backend cost model", _check, group="cactus_bench.costs")

COSTS.add(
    "hf",
    CostModel(
        gpu_engine={"eager": "eager", "fast": "fast", "auto": "fast"},  # auto: fast on one CUDA device
        # eager dispatches ~72 ops per layer one by one (~8 us each from Python: 0.6B 2,014 ops and 14B 2,866
        # a forward, counted on a CPU); the fast engine launches one CUDA graph whose kernels cost ~40 us a layer
        launch_s_per_layer={"eager": 72 * 8e-6, "fast": 40e-6},
        # the loop's own ops per Cactus round at m = 4 (results/bench/launch.md: eager 154.8, fast 9), spread
        # over its five forward calls, ~8 us each
        host_s_per_forward={"eager": 154.8 / 5 * 8e-6, "fast": 9 / 2 * 8e-6},
    ),
)
COSTS.add(
    "vllm",
    CostModel(
        gpu_engine={"eager": "eager", "compiled": "compiled", "auto": "compiled"},
        # vLLM's fused kernels launch ~12 ops a layer (~8 us each from Python) eager; a CUDA graph ~40 us a layer
        launch_s_per_layer={"eager": 12 * 8e-6, "compiled": 40e-6},
        # engine start-up per run: weights, KV cache, and for `compiled` torch.compile and graph capture
        # (measured on a CPU with the SmolLM2 pair: 25-47 s eager, 104-135 s compiled)
        startup_s={"eager": 40.0, "compiled": 135.0},
    ),
)
