"""Resource samples of running instances: taking them (`sampling`), keeping
them bounded (`downsampling`), and reading them back (`queries`) for the
console's charts, the CLI, Prometheus and the idle stop."""

from gpudock.services.metrics.queries import gpu_utilisation_since

__all__ = ["gpu_utilisation_since"]
