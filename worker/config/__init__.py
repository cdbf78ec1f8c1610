"""The configuration tree: every `KERNELJUDGE_*` variable the service, the workers and the engine read.

`tree.load_config()` reads them all, once per process (`kerneljudge serve`, `kerneljudge worker` and each
of its Celery processes, `kerneljudge eval` and `build`), into one `KernelJudgeConfig` of sections (API,
jobs, pipeline, engine, sandbox), and the entry point passes the sections down: nothing else reads the
environment for them. docs/configuration.md lists the variables (tests/test_docs.py checks it against the
sections' fields).
"""
