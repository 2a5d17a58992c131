# Two commands set everything up from nothing:
#   make speak TEXT="Hello"   creates .venv, installs ttscli, speaks with the embedded voice -> speech.wav
#   make test                 creates .venv, installs ttscli with its test extras, lints (ruff), builds the docs, runs the
#                             fast tests (all but those marked slow) on TEST_WORKERS processes (pytest-xdist; a test
#                             file stays on one process, so a module's server fixture starts once)
#   make test-all             the slow tests only (soak, eval over many sentences, real-weight end-to-end, Ray runs);
#                             make test then make test-all runs every test once, as .ci/run does
#   make docs                 builds the documentation site from docs/ into site/ (broken links fail the build)
#   make browser              installs Debian's chromium when it is missing (as root), for the playground page's
#                             test in a headless browser; make test runs it first
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
TEXT   ?= Hello from ttscli, speaking on this machine with no network.
OUT    ?= speech.wav
STAMP  := $(VENV)/.installed
TEST_WORKERS ?= 2

.PHONY: install speak test test-all docs clean blas browser

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m pip install -q --no-deps 'resemblyzer==0.1.4'  # eval's speaker-encoder weights; its own deps would pull torch
	@$(BIN)/python -m pip install -q -e '.[mkl]' || echo "note: no MKL wheel here; ttscli falls back to OpenBLAS"
	@scripts/install-openblas.sh || true
	@touch $(STAMP)

install: $(STAMP)

speak: $(STAMP)
	$(BIN)/ttscli speak "$(TEXT)" -o $(OUT)

docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

test: $(STAMP) docs browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadfile --durations=40

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -m slow --durations=25

# Playwright drives this chromium (its own browser download needs a site other than the registries)
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
	  echo "note: chromium could not be installed (apt-get install chromium, as root); the browser test skips outside CI"

blas:
	scripts/install-openblas.sh

clean:
	rm -rf $(VENV) build site *.egg-info
