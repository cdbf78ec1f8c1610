"""OpenRLHF: `--remote_rm_url examples/openrlhf_reward_func.py --label_key reference`.

(Or `--remote_rm_url http://SERVER/get_reward`: the service answers the same contract itself.)
"""
import asyncio

import torch

from kerneljudge.adapters.openrlhf import score_request


def reward_func(queries, prompts, labels):
    body = {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
    response = asyncio.run(score_request(body, timeout_s=900))  # service errors score 0.0
    return {"rewards": torch.tensor(response["rewards"]), "scores": torch.tensor(response["scores"]),
            "extra_logs": {k: torch.tensor(v) for k, v in response["extra_logs"].items()}}
