"""Background passes that converge the runtime to the database: the loop and,
one module each, placement, the per-instance lifecycle steps, liveness,
garbage, charging, GPU health and the system-disk watchdog."""
