# `make run`  : create .venv and run the BreakNLI loop on the embedded default (shipped mini models + SNLI sample)
# `make test` : create .venv and run the test-suite (CPU, offline)
# `make test-ray`: the sharded-study tests alone
# `make test-compat`: create .venv-compat (transformers 5.x, constraints-tf5.txt) and run the test-suite there
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
VENV_COMPAT ?= .venv-compat
PY_COMPAT := $(VENV_COMPAT)/bin/python
STAMP_COMPAT := $(VENV_COMPAT)/.installed

.PHONY: setup setup-compat run test test-ray test-compat clean

$(STAMP): pyproject.toml constraints.txt Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, from the local CPU wheel; a looser pin would pull several GB of CUDA wheels
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[onnx,hub,bench,test,ray,ct2,merge,loadgen,openvino]"
	touch $(STAMP)

# the second stack: transformers 5.x and huggingface_hub 1.x (the same tests, Flan-T5's ONNX export among them)
$(STAMP_COMPAT): pyproject.toml constraints-tf5.txt
	$(PYTHON) -m venv $(VENV_COMPAT)
	$(PY_COMPAT) -m pip install -q --upgrade pip
	$(PY_COMPAT) -m pip install -q torch==2.13.0
	$(PY_COMPAT) -m pip install -q -c constraints-tf5.txt -e ".[onnx,hub,bench,test,ray,loadgen]"
	touch $(STAMP_COMPAT)

setup: $(STAMP)

setup-compat: $(STAMP_COMPAT)

run: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/breaknli-fast run

test: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

# the sharded-study tests alone (Ray is installed by setup; without it they skip, saying why)
test-ray: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q tests/test_ray.py

test-compat: setup-compat
	HF_HUB_OFFLINE=1 $(PY_COMPAT) -m pytest -q

clean:
	rm -rf $(VENV) $(VENV_COMPAT) runs .pytest_cache *.egg-info
