"""OpenRLHF: `--remote_rm_url examples/openrlhf_reward_func.py --label_key reference`.

(Or `--remote_rm_url 'http://SERVER/get_reward?key=KEY'`: the service answers the same contract itself.)
"""
import asyncio

from kerneljudge.adapters.openrlhf import score_request


def reward_func(queries, prompts, labels):
    # {"rewards": [...], "scores": [1.0 if correct else 0.0, ...], "extra_logs": {"kerneljudge/...": [...]}}
    body = {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
    return asyncio.run(score_request(body, timeout_s=900))  # service errors score 0.0
