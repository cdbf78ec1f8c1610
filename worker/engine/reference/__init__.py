"""The problem's reference, as the supervisor holds it: its warm judge (judge.py), starting one (judge_start.py),
and the cache of judges by problem (reference_cache.py)."""
