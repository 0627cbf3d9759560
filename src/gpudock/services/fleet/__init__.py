"""Hosts and GPUs: the inventory, GPU faults and states, moves off failing GPUs,
reliability figures."""
