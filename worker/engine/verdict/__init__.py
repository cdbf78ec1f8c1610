"""From what ran to the verdict: which kernels were the candidate's (attribution.py, kernel_names.py), the runtime
rules with their evidence (verification.py, physics.py), the reward formula (reward.py), the EvalResult
(result_builder.py)."""
