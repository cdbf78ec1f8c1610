"""Distributed execution: Celery workers (one per GPU) fed through a Redis broker."""
