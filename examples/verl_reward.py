"""veRL: point the trainer at this file (set KERNELJUDGE_URL and KERNELJUDGE_API_KEY).

    python -m verl.trainer.main_ppo ... \
        custom_reward_function.path=examples/verl_reward.py custom_reward_function.name=compute_score

Each row's reward_model.ground_truth is the reference source or a registered problem id.
"""
from kerneljudge.adapters.verl import compute_score

__all__ = ["compute_score"]  # returns {"score", "format", "compiled", "correct", "speedup", "fallback"}
