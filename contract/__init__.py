"""The public contract: what client, server, workers and the judge all depend on (pydantic only, no torch).

statuses.py (evaluation and job statuses, the enums a request names), requests.py (EvalRequest, EvalOptions),
results.py (EvalResult and its reports), jobs.py (the job as the HTTP API returns it), outcomes.py (a
result read as a trainer's reward), get_reward.py (the `/get_reward` contract). Nothing here imports
`worker`, `app` or `kerneljudge`.
"""
