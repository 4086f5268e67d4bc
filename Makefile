# The two set-up commands of the README: `make demo` (the main job on the embedded input) and `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: demo test install install-dev style quality bench

install:
	$(PIP) install -q -e ".[all]"

install-dev:
	$(PIP) install -q -e ".[dev]"

demo: install
	stackcurate sample work/sample
	stackcurate run pipelines/demo.yaml
	stackcurate stats work/demo

test: install-dev
	RAY_USAGE_STATS_ENABLED=0 RAY_DATA_DISABLE_PROGRESS_BARS=1 $(PYTHON) -m pytest -q

style:
	ruff format stackcurate tests benchmarks
	ruff check --fix stackcurate tests benchmarks

quality:  # pyright comes from npm: npm i -g pyright
	ruff check stackcurate tests benchmarks
	pyright stackcurate

bench: install
	$(PYTHON) benchmarks/ingest_throughput.py
