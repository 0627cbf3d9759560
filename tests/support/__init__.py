"""Shared test helpers: factories, clocks, platforms, server processes, engines."""
