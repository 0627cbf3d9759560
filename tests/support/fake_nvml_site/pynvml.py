"""`pynvml` for agent processes a test starts (this directory goes first on their
PYTHONPATH): the suite's FakeNvml, its GPUs read from the JSON file named by
GPUDOCK_TEST_NVML_STATE at every nvmlInit, so the agent's real NVML code runs
and a test changes a host's GPUs by rewriting the file.

    {"driver_version": "550.54.15", "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-…",
      "memory_total": 150754820096, "bus_id": "00000000:1B:00.0"}],
     "xids": [[0, 79]]}

`xids`: [GPU index, Xid] pairs the driver raised, oldest first; a test appends one
and the agent's event set reports it once (at its next wait).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.gpu.fake_pynvml import FakeGpu, FakeNvml, c_nvmlEventData_t


class StateFileNvml(FakeNvml):
    def __init__(self, state: Path) -> None:
        super().__init__()
        self.state = state
        self.xids_raised = 0

    def nvmlInit(self) -> None:
        self.calls.clear()  # a long-running agent would keep every call otherwise
        data = json.loads(self.state.read_text())
        self.devices = [FakeGpu(**gpu) for gpu in data["gpus"]]
        self.driver_version = data.get("driver_version", self.driver_version)
        super().nvmlInit()

    def nvmlEventSetWait_v2(self, eventSet: object, timeoutms: int) -> c_nvmlEventData_t:
        raised = json.loads(self.state.read_text()).get("xids", [])
        for index, xid in raised[self.xids_raised :]:
            self.inject_xid(index, xid)
        self.xids_raised = max(self.xids_raised, len(raised))
        return super().nvmlEventSetWait_v2(eventSet, timeoutms)


sys.modules[__name__] = StateFileNvml(Path(os.environ["GPUDOCK_TEST_NVML_STATE"]))
