"""The timed loop both sides run (timer.py), the spacer between its calls (spacer.py) and the timing inputs'
variants the judge makes (timing_variants.py)."""
