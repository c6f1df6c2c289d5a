# Set-up, demo, tests and benchmarks. Everything tracelink needs is installed from here.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_OUT := out/demo

.PHONY: setup demo test bench fuzz browser clean

# The venv, tracelink (editable, which also builds the native hook) and its pinned dependencies.
$(STAMP): pyproject.toml setup.py $(wildcard native/*.c native/*.h)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/tracelink profile examples/mlp.mlir -o $(DEMO_OUT)

# The report's browser tests drive Debian's Chromium headless; install it when missing (needs root).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null)

test: setup browser
	$(BIN)/python -m pytest -q

bench: setup browser
	$(BIN)/python tests/bench/run_all.py

# The fuzz properties of tests/test_fuzz.py with many more inputs each (FUZZ_EXAMPLES); a failure
# prints the input that raised something other than a one-line error.
FUZZ_EXAMPLES ?= 20000
fuzz: setup
	TRACELINK_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q tests/test_fuzz.py --hypothesis-show-statistics -p no:cacheprovider

clean:
	rm -rf $(VENV) out build *.egg-info tracelink/libtracelink_hook.so tests/_output
