"""The environment doctor: probes a machine (driver, GPUs, CUDA, torch, nvcc),
diagnoses what does not fit and prints the exact fix. Standalone: it runs
inside instances and on laptops with no server, and ships as one file
(`bundle.py`)."""
