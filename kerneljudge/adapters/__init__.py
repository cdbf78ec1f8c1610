"""Drop-in reward functions for RL trainers (TRL, veRL, OpenRLHF, verifiers).

Each adapter turns the trainer's batch into kerneljudge submissions and never raises into
the trainer: when the service times out or fails, the sample gets the adapter's documented
fallback reward (0.0 unless configured) and the reason is logged.
"""
