"""GPU inventory sources: NVML on real hosts, a simulated fleet elsewhere."""
