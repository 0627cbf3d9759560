"""Container runtimes behind one small interface (Docker now, Kubernetes later)."""
