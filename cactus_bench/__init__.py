"""cactus-bench: a benchmark harness for speculative sampling acceptance rules.

The folders are the layers, lowest first; a module imports only from its own layer and the ones below it
(tests/test_architecture.py reads the imports and checks it):

- `core`: the science, on torch and transformers alone (registries, rules, methods, metrics, the decode engine)
- `backends`: what decodes a run (`hf`: transformers with its model loader; `vllm`), registered through
  the `cactus_bench.backends` entry points as outside backends are
- `adapters`: benchmarks and the embedded offline pair
- `app`: the Hydra app (one run: config, store, tracking, lm-eval's model)
- `tools`: what reads or drives runs (reports and figures, sweeps, plans, re-scoring, dashboards, perf)
"""

LAYERS = ("core", "backends", "adapters", "app", "tools")
