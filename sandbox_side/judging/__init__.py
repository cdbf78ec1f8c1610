"""The judge inside its sandbox (judge_process.py) and the comparison it makes on its own device.

It never runs candidate code: a candidate's outputs arrive in a sealed memory file of the candidate's and
are compared here with correctness.py (tolerances, float64 truth), probes.py, discrimination.py,
input_checks.py and precision.py.
"""
