"""REST API under /api/v1 (FastAPI)."""
