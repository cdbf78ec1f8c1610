"""The job store's schema revisions (Alembic), oldest first: 0001, 0002, ..."""
