# `make run`  : create .venv and run the BreakNLI loop on the embedded default (shipped mini models + SNLI sample)
# `make test` : create .venv and run the test-suite (CPU, offline)
# `make test-ray`: the sharded-study tests alone
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test test-ray clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, from the local CPU wheel; a looser pin would pull several GB of CUDA wheels
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[onnx,bench,test,ray]"
	touch $(STAMP)

setup: $(STAMP)

run: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/breaknli-fast run

test: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

# the sharded-study tests alone (Ray is installed by setup; without it they skip, saying why)
test-ray: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q tests/test_ray.py

clean:
	rm -rf $(VENV) runs .pytest_cache *.egg-info
