"""The server settles its heap once it is ready (`api/heap.py`), in a process of
its own here: freezing the test runner's heap would outlive the test."""

from __future__ import annotations

import json
import subprocess
import sys

from gpudock.api.heap import YOUNG_GENERATION_OBJECTS

PROBE = """
import gc, json
import gpudock.api.app  # what a server has imported when it is ready
from gpudock.api.heap import settle_heap
before = gc.get_freeze_count()
frozen = settle_heap()
print(json.dumps({"before": before, "frozen": frozen, "threshold": gc.get_threshold()}))
"""


def test_start_up_objects_are_frozen_and_young_collections_made_rarer() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    probe = json.loads(done.stdout)
    assert probe["before"] == 0
    assert probe["frozen"] > 10_000  # the imported modules alone are tens of thousands
    assert probe["threshold"] == [YOUNG_GENERATION_OBJECTS, 10, 10]
