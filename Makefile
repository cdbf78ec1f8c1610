# The two commands of the README.
.PHONY: serve test lint
HOST ?= 127.0.0.1
PORT ?= 8000
serve:  ## set up, then run the service (embedded workers, SQLite, CPU or local GPUs); HOST=..., PORT=...
	scripts/setup.sh server
	.venv/bin/kerneljudge serve --host $(HOST) --port $(PORT)

test:   ## set up, then run the tests (starts its own Redis and PostgreSQL on loopback)
	scripts/test.sh

lint:
	.venv/bin/python -m ruff check .
	.venv/bin/python -m mypy
