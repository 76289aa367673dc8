# bigearthnet-hpc: the commands a user and CI run. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
# The TensorFlow stack for this Python (scripts/stack.sh): 2.15 on Python 3.9-3.11 unless
# TF_STACK=2.18; 2.18 on 3.12. Each stack has its own venv: .venv (2.15), .venv-tf2.18.
STACK := $(shell PYTHON=$(PYTHON) TF_STACK=$(TF_STACK) bash scripts/stack.sh)
VENV ?= $(if $(filter 2.15,$(STACK)),.venv,.venv-tf$(STACK))
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp
DEMO_DIR ?= demo
SEED_TABLE_DIR ?= seed-table
FAULTS_TABLE ?=
BAD_INPUT_TABLE ?=
SHARED ?= ../shared
# pytest-xdist workers per tier: one per core of the 2-core CI machine. Tests that share a
# resource (the Slurm test cluster) carry an xdist_group and run in one worker. WORKERS=0
# runs a tier in one process (pdb, -x, output in order).
WORKERS ?= 2
XDIST := $(if $(filter 0,$(WORKERS)),-p no:xdist,-n $(WORKERS) --dist loadgroup)

# The second stack runs the tests that touch TensorFlow, Keras or Horovod: every API the
# project uses (layers and the model registry, legacy optimizers, LR schedules, tf.function
# steps, precise BN, augmentation, DLPack caches, checkpoints across stacks, Horovod
# collectives in 2-rank runs, prediction for evaluation and scene maps, SavedModel and ONNX
# export). The rest of the
# suite is Python that a second TensorFlow does not change.
STACK_TESTS := tests/test_stacks.py tests/models tests/training tests/data tests/evaluation \
	tests/maps/test_scene.py tests/export tests/weights

.PHONY: help setup demo seed-table test test-slow test-heavy test-all test-stack test-reference faults bad-input lint bench bench-stacks clean-demo

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'
	@echo "Variables: TF_STACK=2.18 (the second TensorFlow stack, its own venv), PYTHON=python3.X,"
	@echo "  WORKERS=0 (a tier in one process), DEMO_DIR=$(DEMO_DIR), SEED_TABLE_DIR=$(SEED_TABLE_DIR),"
	@echo "  SHARED=$(SHARED) (the real samples the tests read)."
	@echo "The commands (bigearthnet-*, python train.py) are in $(VENV)/bin: source $(VENV)/bin/activate."

setup: $(STAMP)  ## build the venv (TF 2.15 or, TF_STACK=2.18, TF 2.18 + Horovod 0.28.1); no-op when up to date

# Re-run only when what the environment is built from changed.
$(STAMP): setup.cfg pyproject.toml scripts/setup_env.sh
	@test -n "$(STACK)" || exit 2  # scripts/stack.sh said why above
	VENV=$(VENV) PYTHON=$(PYTHON) STACK=$(STACK) bash scripts/setup_env.sh
	touch $@

demo: $(STAMP)  ## synthetic archive -> preprocess -> 2-rank training -> evaluation -> export -> maps (patches, a scene, a region over time) -> the run's page
	VENV=$(VENV) DEMO_DIR=$(DEMO_DIR) bash scripts/demo.sh

test: $(STAMP)  ## the fast tier (< 5 min on 2 cores): every test but the slow, fault, bad-input and reference tiers
	SHARED_DIR=$(SHARED) $(PY) -m pytest $(XDIST)

test-stack: $(STAMP)  ## the tests that touch TensorFlow/Keras/Horovod (CI: on the second stack)
	SHARED_DIR=$(SHARED) $(PY) -m pytest $(XDIST) $(STACK_TESTS)

test-slow: $(STAMP)  ## only the slow tests (real Slurm, elastic); CI runs them in `make test-heavy`
	SHARED_DIR=$(SHARED) $(PY) -m pytest $(XDIST) -m "slow and not fault"

faults: $(STAMP)  ## inject each fault into real runs; prints the fault table (FAULTS_TABLE=file writes it)
	SHARED_DIR=$(SHARED) BEN_FAULTS_TABLE=$(FAULTS_TABLE) $(PY) -m pytest $(XDIST) -m fault

bad-input: $(STAMP)  ## one bad input per test, every command; prints the bad-input table (BAD_INPUT_TABLE=file writes it)
	SHARED_DIR=$(SHARED) BEN_BAD_INPUT_TABLE=$(BAD_INPUT_TABLE) $(PY) -m pytest $(XDIST) -m bad_input

test-heavy: $(STAMP)  ## the slow, fault and bad-input tiers in one run (CI): one Slurm cluster, one set of fixtures, both workers busy; prints both tables
	SHARED_DIR=$(SHARED) BEN_FAULTS_TABLE=$(FAULTS_TABLE) BEN_BAD_INPUT_TABLE=$(BAD_INPUT_TABLE) $(PY) -m pytest $(XDIST) -m "slow or fault or bad_input"

seed-table: $(STAMP)  ## the seed study's batch table in miniature on the realistic archive (SGD and LAMB, 4 batch sizes over 64x; <= 30 min on 2 cores): SEED_TABLE_DIR/seed_table.csv, .html
	VENV=$(VENV) SEED_TABLE_DIR=$(SEED_TABLE_DIR) bash scripts/seed_table.sh

test-reference: $(STAMP)  ## imported weights against PyTorch's own forward pass (installs .[torch]: PyTorch, timm)
	$(VENV)/bin/pip install -q -e '.[torch]'
	SHARED_DIR=$(SHARED) $(PY) -m pytest -m reference -rs

test-all: $(STAMP)  ## every tier in one run, the slow multi-process and Slurm ones included (the reference tier skips without PyTorch)
	SHARED_DIR=$(SHARED) $(PY) -m pytest $(XDIST) -m "slow or not slow"

lint: $(STAMP)  ## ruff, mypy, and the import layering (import-linter: no cycle, no upward import); .pre-commit-config.yaml runs the same
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: $(STAMP)  ## benchmarks side by side; writes benchmarks/results.json
	$(PY) benchmarks/run_all.py

bench-stacks: $(STAMP)  ## P3 on both TensorFlow stacks in one run (builds the 2.18 venv first)
	$(MAKE) setup TF_STACK=2.18
	$(PY) benchmarks/train_throughput.py --knobs --other-python .venv-tf2.18/bin/python --json benchmarks/results-stacks.json

clean-demo:  ## remove the demo outputs
	rm -rf $(DEMO_DIR)
