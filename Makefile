# All set-up is here: `make demo` and `make test` build .venv themselves on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-matrix lint typecheck bench gpu-check zoo zoo-autocast clean

$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: the CPU build on disk, never the registry's CUDA one
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[models,plot,lightning,notebook,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

# two workers (pytest-xdist): CI's machine has 2 cores, and the serial suite took ~21 min there; one
# torch thread each (two workers of two threads each on two cores slow every in-process test down)
test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2

# the fast lane: each command's main path (tests/conftest.py marks it `fast`), under 1 min of CPU on 2 cores
# (docs/benchmarks.md, "test lanes")
test-fast: $(STAMP)
	$(PY) -m pytest -q -m fast

# Python 3.10, 3.12 and 3.13 (pyenv), each in a venv under .matrix/ with torch 2.13 installed first:
# the run/watch/warnings/check/explain tests (scripts/test_matrix.py); passed/failed per version
test-matrix:
	python3 scripts/test_matrix.py

lint: $(STAMP) typecheck
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy on the public API ([tool.mypy] in pyproject.toml: its files and settings); ~15 s cold on 2 cores
typecheck: $(STAMP)
	$(PY) -m mypy

bench: $(STAMP)
	for f in benchmarks/bench_*.py benchmarks/integrations.py; do $(PY) $$f || exit 1; done

# on a CUDA machine, its own python and torch (not .venv's CPU build): tests/gpu, the CUDA benchmarks and
# the CUDA autocast table in <= 6.5 min; summary in out/gpu-check/ (docs/benchmarks.md, "make gpu-check")
PYTHON ?= python3
gpu-check:
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) scripts/gpu_check.py

# every architecture the pinned transformers/diffusers build from a tiny config (long: ~30 min on 2 cores)
zoo: $(STAMP)
	cd tests && OMP_NUM_THREADS=1 ../$(PY) -m zoo.run --out ../zoo-results.jsonl

# strict watch and check under CPU autocast bf16/fp16 on every zoo model (false positives: exit 1)
zoo-autocast: $(STAMP)
	cd tests && OMP_NUM_THREADS=1 ../$(PY) -m zoo.autocast --out ../zoo-autocast.jsonl

clean:
	rm -rf $(VENV) .matrix build dist src/*.egg-info
