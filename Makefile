# The two commands of the README.
.PHONY: serve test lint
serve:  ## set up, then run the service (embedded workers, SQLite, CPU or local GPUs)
	scripts/setup.sh server
	.venv/bin/kerneljudge serve

test:   ## set up, then run the tests (starts its own Redis and PostgreSQL on loopback)
	scripts/test.sh

lint:
	.venv/bin/python -m ruff check .
