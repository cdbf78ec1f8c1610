"""kerneljudge reward service: HTTP API (FastAPI) over the job store and the workers."""
