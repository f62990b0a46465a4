# ml-dev-env front door. Every target is a one-line call of `mlenv` (or the test tools)
# and bootstraps .venv on its own from nothing.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
MLENV := $(VENV)/bin/mlenv
# The cluster the cluster targets act on: CLUSTER=x, else the last one `mlenv deploy`
# deployed from this checkout (.mlenv/current-cluster, git-ignored), else local.
CLUSTER ?= $(or $(shell cat .mlenv/current-cluster 2>/dev/null),local)
MODE ?= rdma
NODES ?=
POD ?= 0
# CPU torch for the local venv only: the pod image brings its own CUDA torch.
TORCH_PIN ?= torch==2.13.0
# The DeepSpeed the tests prove is the one the image ships (Dockerfile DEEPSPEED_VERSION).
DEEPSPEED_PIN ?= deepspeed==0.19.8
export TORCH_EXTENSIONS_DIR ?= $(HOME)/.cache/mlenv/torch_extensions
export DS_ACCELERATOR ?= cpu
export MPLBACKEND ?= Agg

# i9.12: every variable that reaches a recipe goes through q: one single-quoted shell
# word, so CLUSTER='x; rm -rf ~' is a (bad) cluster name, never a command.
q = '$(subst ','\'',$(1))'
NODES_FLAG = $(if $(NODES),--nodes $(call q,$(NODES)),)
DRY_FLAG = $(if $(DRY_RUN),--dry-run $(call q,$(DRY_RUN)),)

.PHONY: help venv system-deps demo test lint typecheck lint-image unit validate render render-all \
        list-clusters acceptance deploy-cluster sync-multi-node shell status-cluster logs \
        clean-cluster launch build-image port-forward bench clean

help:
	@echo "make demo | make test | make validate | make render CLUSTER=x MODE=rdma|tcp | make list-clusters"
	@echo "make deploy-cluster CLUSTER=x MODE=rdma [NODES=N] [DRY_RUN=client|server] | make sync-multi-node [WATCH=1] | make shell"

# The venv is rebuilt when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e '.[dev]' numpy matplotlib
	$(PY) -m pip install -q --no-build-isolation "$(DEEPSPEED_PIN)"
	@touch $@

venv: $(VENV)/.installed

# Tools the integration tier needs (sshd, pdsh, iproute2, shellcheck). Installed only
# when missing and we are root with apt; otherwise those tests skip with the reason.
system-deps:
	@bash scripts/dev/system-deps.sh

demo: venv
	$(MLENV) validate
	$(MLENV) render --all
	$(MLENV) acceptance --local --profile quick --report-dir reports/demo

lint: venv
	$(VENV)/bin/ruff check mlenv tests benchmarks

typecheck: venv
	$(VENV)/bin/mypy

# hadolint for the Dockerfile, shellcheck for scripts/ and workspace/ shell entry points.
lint-image: venv system-deps
	bash scripts/dev/lint-image.sh

unit: venv
	$(VENV)/bin/pytest -q tests/unit tests/cli

test: venv system-deps lint typecheck lint-image
	$(MLENV) validate
	$(MLENV) render --all --check
	$(VENV)/bin/pytest -q tests

validate: venv
	$(MLENV) validate

render: venv
	$(MLENV) render $(call q,$(CLUSTER)) --mode $(call q,$(MODE)) $(NODES_FLAG)

render-all: venv
	$(MLENV) render --all

list-clusters: venv
	$(MLENV) list-clusters

acceptance: venv
	$(MLENV) acceptance --local --nproc $(call q,$(or $(NPROC),2)) --profile $(call q,$(or $(PROFILE),quick))

deploy-cluster: venv
	$(MLENV) deploy $(call q,$(CLUSTER)) --mode $(call q,$(MODE)) $(NODES_FLAG) $(DRY_FLAG)

sync-multi-node: venv
	$(MLENV) sync $(call q,$(CLUSTER)) $(if $(WATCH),--watch,)

shell: venv
	$(MLENV) shell $(call q,$(CLUSTER)) --pod $(call q,$(POD))

status-cluster: venv
	$(MLENV) status $(call q,$(CLUSTER))

logs: venv
	$(MLENV) logs $(call q,$(CLUSTER)) --pod $(call q,$(POD))

port-forward: venv
	$(MLENV) port-forward $(call q,$(CLUSTER))

launch: venv
	$(MLENV) launch $(call q,$(CLUSTER)) $(if $(TORCHRUN),--torchrun,) $(if $(SCRIPT),$(call q,$(SCRIPT)),)

clean-cluster: venv
	$(MLENV) teardown $(call q,$(CLUSTER)) $(if $(PURGE),--purge,)

build-image: venv
	$(MLENV) build $(call q,$(CLUSTER))

bench: venv
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache reports acceptance-report
