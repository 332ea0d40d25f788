# Ibex Context. `make run` starts the service; `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test run stubs bench lint clean redis-server-present

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

redis-server-present:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server (needed by the tests)"; \
	  (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null || { echo "could not install redis-server"; exit 1; }; }

lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python -m contracts.generate --check

test: $(STAMP) redis-server-present lint
	$(BIN)/python -m pytest -q

run: $(STAMP)
	$(BIN)/ibex-context demo load
	$(BIN)/ibex-context serve

stubs: $(STAMP)
	$(BIN)/python -m contracts.generate

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
