# cactus-bench — `make help` lists the targets.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Offline by default: hub ids fail at once rather than retrying; data from ../shared/data when present.
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM ?= false
export CACTUS_BENCH_DATA ?= $(abspath ../shared/data)
export NLTK_DATA ?= $(CACTUS_BENCH_DATA)/nltk_data

.DEFAULT_GOAL := help
.PHONY: help install test test-all lint bench-rules bench-speed

help:  ## List the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-20s\033[0m %s\n", $$1, $$2}'

$(PY):
	python3 -m venv $(VENV)

install: $(PY)  ## Create .venv and install (CPU torch first, pinned, so pip never pulls a CUDA build)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev]" -c constraints.txt

test:  ## Run the default test suite (fast; offline)
	$(PY) -m pytest -q -m "not slow"

test-all:  ## Run every test, slow end-to-end ones included
	$(PY) -m pytest -q

lint:  ## Lint with ruff
	$(PY) -m ruff check cactus_bench tests scripts

bench-rules:  ## Time one verify() per rule at V=151,936 vs a softmax; writes results/bench/rules.*
	$(PY) scripts/bench_rules.py --out results/bench/rules

bench-speed:  ## Our loop vs HF generate / assisted generation; writes results/bench/speed.*
	$(PY) scripts/bench_speed.py --out results/bench/speed
