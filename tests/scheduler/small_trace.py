"""A small openb-format trace, written to files, for end-to-end tests."""

from __future__ import annotations

import csv
import random
from pathlib import Path

NODE_FIELDS = ["sn", "cpu_milli", "memory_mib", "gpu", "model"]
POD_FIELDS = [
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
]


def write_small_trace(directory: Path, *, nodes: int = 12, pods: int = 60) -> tuple[Path, Path]:
    rng = random.Random(7)
    node_path, pod_path = directory / "nodes.csv", directory / "openb_pod_list_small.csv"
    with node_path.open("w", newline="") as f:
        w = csv.DictWriter(f, NODE_FIELDS)
        w.writeheader()
        for i in range(nodes):
            gpus, model = ((8, "G2"), (2, "T4"), (4, "V100M16"))[i % 3]
            w.writerow(
                {
                    "sn": f"node-{i:03d}",
                    "cpu_milli": 64_000,
                    "memory_mib": 262_144,
                    "gpu": gpus,
                    "model": model,
                }
            )
    with pod_path.open("w", newline="") as f:
        w = csv.DictWriter(f, POD_FIELDS)
        w.writeheader()
        for i in range(pods):
            num, milli = rng.choice(
                [(1, 1000), (1, 1000), (1, 470), (1, 810), (2, 1000), (8, 1000), (0, 0)]
            )
            created = i * 60
            w.writerow(
                {
                    "name": f"pod-{i:04d}",
                    "cpu_milli": rng.choice([2000, 4000, 8000]),
                    "memory_mib": 8192,
                    "num_gpu": num,
                    "gpu_milli": milli,
                    "gpu_spec": rng.choice(["", "", "G2|V100M16"]),
                    "qos": "LS",
                    "pod_phase": "Running",
                    "creation_time": created,
                    "deletion_time": created + rng.randint(60, 3600),
                    "scheduled_time": created,
                }
            )
    return node_path, pod_path
