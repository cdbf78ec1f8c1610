"""How queued jobs reach the workers: one interface (launcher.py), two launchers (embedded_launcher.py,
celery_launcher.py). Nothing is imported here, so that embedded mode never imports Celery."""
