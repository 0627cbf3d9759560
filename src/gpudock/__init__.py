"""gpudock: a self-hosted GPU cloud."""

__version__ = "0.1.0"
