# Set-up, demo, tests and benchmarks. Everything tracelink needs is installed from here.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_OUT := out/demo

.PHONY: setup demo test bench bench-strategies zoo fuzz browser vulkan docs clean

# The venv, tracelink (editable, which also builds the native hook) and its pinned dependencies, with the
# jax and torch extras (the frameworks `tracelink profile model.py:make` exports from; the tests use both) and
# the ray extra (`tune --ray`, tests/test_tune_ray.py).
# torch goes first, on its own: resolved alone, `torch==2.13.0` takes the CPU wheel where one is offered.
$(STAMP): pyproject.toml setup.py $(wildcard native/*.c native/*.h)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check 'torch==2.13.0'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,jax,torch,ray]'
	$(BIN)/python -m compileall -q tracelink  # as pip does for a wheel: where PYTHONDONTWRITEBYTECODE is set, no run would write it
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/tracelink profile examples/mlp.mlir -o $(DEMO_OUT)

# The report's browser tests drive Debian's Chromium headless; install it when missing (needs root).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null)

# The GPU tests run on Mesa's lavapipe, a Vulkan driver on the CPU; install it when no Vulkan ICD is present (needs root).
vulkan:
	@ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers libvulkan1 >/dev/null)

test: setup browser vulkan
	$(BIN)/python -m pytest -q

bench: setup browser
	$(BIN)/python tests/bench/run_all.py

# Only the strategy table on real weights (section 4 of bench_tune.py: squeezenet, inception_v1 and
# resnet50, tune and the race of every option set), about 30 minutes; `make bench` runs it too, with the rest.
bench-strategies: setup
	$(BIN)/python tests/bench/bench_tune.py --skip-search --race-programs --workloads

# Every `transformers` architecture with a base model, a causal LM, an image or an audio class, built small from its
# config, through torch.export and `tracelink profile`, one subprocess per model (tests/bench/zoo.py): one table of
# what exported and profiled and why the rest failed. Resumable: out/zoo/results.jsonl keeps the rows done.
# ZOO_FLAGS: e.g. --limit 120, --only bert,vit, --jobs 2.
ZOO_FLAGS ?=
zoo: setup
	$(BIN)/python tests/bench/zoo.py --out out/zoo $(ZOO_FLAGS)

# FUZZ_INPUTS mutated inputs through the readers of untrusted bytes, over every core (tests/fuzz_mass.py):
# a table per target; the first input that raised anything but a one-line error is saved under tests/_output/fuzz/failures.
FUZZ_INPUTS ?= 1000000
fuzz: setup
	$(BIN)/python -m tests.fuzz_mass --inputs $(FUZZ_INPUTS)

# The reference (docs/reference/) as a static site in out/docs; MkDocs' built-in theme needs no network.
docs: setup
	$(BIN)/mkdocs build --strict --quiet -f docs/mkdocs.yml
	@echo "the reference is in out/docs/index.html"

clean:
	rm -rf $(VENV) out build *.egg-info tracelink/libtracelink_hook.so tests/_output
