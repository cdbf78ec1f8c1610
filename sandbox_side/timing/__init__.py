"""The timed loop both sides run (timer.py) and the timing inputs' variants the judge makes (timing_variants.py)."""
