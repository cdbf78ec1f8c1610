"""kerneljudge: the trainer-side client and the `kerneljudge` command line.

The client needs only pydantic and httpx; the `eval`, `serve` and `worker` subcommands
load the engine and the service lazily, so `pip install kerneljudge` stays light.
"""
