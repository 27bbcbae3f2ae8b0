# Thin wrapper over dev.py, which needs only Python and pip (it makes .venv and installs pinned versions).
PY ?= python3

.PHONY: install format lint typecheck test test-latest bench matrix all ci

install:
	$(PY) dev.py install
format: install
	.venv/bin/ruff check --fix . && .venv/bin/ruff format .
lint:
	$(PY) dev.py lint
typecheck:
	$(PY) dev.py typecheck
test:
	$(PY) dev.py test
test-latest:
	$(PY) dev.py test-latest
bench:
	$(PY) dev.py bench
matrix:
	$(PY) dev.py matrix
ci:
	$(PY) dev.py ci
all: lint typecheck test
