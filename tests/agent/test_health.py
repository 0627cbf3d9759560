"""GPU health read on the agent's host: the journal, the watcher over the real NVML
code (a fake NVML below it), and delivery over the real link to the server's
fault record (real gateway and agents over TCP on 127.0.0.1, real SQLite)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from gpudock.agent.health import HealthJournal, HealthWatcher
from gpudock.db.models import GpuDeviceModel, GpuFaultModel, GpuState, LinkState
from gpudock.gpu.base import HealthEvent
from gpudock.gpu.nvml import NvmlGpuSource
from gpudock.link.wire import MAX_HEALTH_RECORDS, HealthRecord
from gpudock.platform import Platform
from gpudock.services.agents import hosts
from gpudock.services.fleet.agent_health import record_agent_health
from tests.gpu.fake_pynvml import FakeNvml, NVMLError_DriverNotLoaded, h200_1x
from tests.support.agents import LinkRig, join_parts
from tests.support.platforms import PlatformFactory
from tests.support.sshgw import wait_for

XID_79 = HealthEvent("GPU-a", "xid", 79)


# -- the journal ----------------------------------------------------------------------
def test_records_are_numbered_kept_across_a_restart_and_dropped_once_acknowledged(
    tmp_path: Path,
) -> None:
    journal = HealthJournal(tmp_path)
    first = journal.record([XID_79, HealthEvent("GPU-b", "ecc_dbe", message="NVML ECC event")])
    assert [(r.seq, r.gpu_uuid, r.kind, r.xid) for r in first] == [
        (1, "GPU-a", "xid", 79),
        (2, "GPU-b", "ecc_dbe", None),
    ]
    reopened = HealthJournal(tmp_path)  # the agent restarted (or was killed) here
    assert [r.seq for r in reopened.pending()] == [1, 2]
    assert reopened.acknowledge(1) is True  # one left to send
    assert [r.seq for r in reopened.pending()] == [2]
    assert reopened.acknowledge(1) is False  # the same ack again changes nothing
    assert reopened.acknowledge(2) is False
    assert reopened.pending() == []
    (third,) = HealthJournal(tmp_path).record([XID_79])
    assert third.seq == 3  # numbers never repeat, though nothing was pending


def test_a_server_ahead_of_a_lost_journal_gets_the_records_renumbered_not_dropped(
    tmp_path: Path,
) -> None:
    journal = HealthJournal(tmp_path)
    journal.record([XID_79, XID_79])
    # The server holds 40 records of this host's earlier journal: it recorded none of these.
    assert journal.acknowledge(40) is True
    assert [r.seq for r in journal.pending()] == [41, 42]
    assert HealthJournal(tmp_path).record([XID_79])[0].seq == 43


def test_a_damaged_journal_is_kept_aside_and_a_new_one_started(tmp_path: Path) -> None:
    (tmp_path / "health.json").write_text('{"acked": 3, "pending": [')
    journal = HealthJournal(tmp_path)
    assert journal.pending() == []
    assert (tmp_path / "health.damaged").read_text().startswith('{"acked": 3')
    assert journal.record([XID_79])[0].seq == 1
    assert json.loads((tmp_path / "health.json").read_text())["next"] == 2


def test_a_backlog_goes_out_a_heartbeats_worth_at_a_time(tmp_path: Path) -> None:
    journal = HealthJournal(tmp_path)
    journal.record([XID_79] * (MAX_HEALTH_RECORDS + 5))
    assert len(journal.pending()) == MAX_HEALTH_RECORDS
    assert journal.acknowledge(MAX_HEALTH_RECORDS) is True
    assert [r.seq for r in journal.pending()] == list(range(101, 106))


# -- the watcher over the real NVML code ----------------------------------------------
def test_the_watcher_journals_each_xid_and_a_standing_condition_once(tmp_path: Path) -> None:
    nvml = h200_1x()
    watcher = HealthWatcher(NvmlGpuSource(nvml=nvml), HealthJournal(tmp_path))
    uuid = nvml.devices[0].uuid
    assert watcher.poll_once() == []
    nvml.inject_xid(0, 48)
    nvml.inject_xid(0, 48)
    nvml.remapped_rows[0] = (0, 1, 1, 0)  # pending a reset: NVML says so on every poll
    first = watcher.poll_once()
    assert [(r.kind, r.xid, r.gpu_uuid) for r in first] == [
        ("xid", 48, uuid),
        ("xid", 48, uuid),
        ("remapped_rows_pending", None, uuid),
    ]
    assert watcher.poll_once() == []  # still pending: not journaled again
    nvml.remapped_rows[0] = (0, 1, 0, 0)  # the reset cleared it ...
    assert watcher.poll_once() == []
    nvml.remapped_rows[0] = (0, 2, 1, 0)  # ... and it came back: a new record
    assert [r.kind for r in watcher.poll_once()] == ["remapped_rows_pending"]
    assert [r.seq for r in watcher.journal.pending()] == [1, 2, 3, 4]


def test_an_unreadable_nvml_journals_nothing_and_is_read_again_once_it_answers(
    tmp_path: Path,
) -> None:
    nvml = h200_1x()
    nvml.init_error = NVMLError_DriverNotLoaded
    watcher = HealthWatcher(NvmlGpuSource(nvml=nvml), HealthJournal(tmp_path))
    assert watcher.poll_once() == []
    nvml.init_error = None
    nvml.inject_xid(0, 79)
    assert [r.xid for r in watcher.poll_once()] == [79]


# -- delivery to the server -------------------------------------------------------------
@pytest.fixture
def platform(platform_factory: PlatformFactory) -> Platform:
    return platform_factory(agent_link_port=0, agent_link_host="127.0.0.1", agent_heartbeat_s=30)


def _enroll(rig: LinkRig, platform: Platform, nvml: FakeNvml) -> str:
    url, token = join_parts(hosts.add_host(platform.ctx, "box-1").join_command)
    rig.join("a", url, token, nvml, watch_health=True)
    return wait_for(
        lambda: (h := hosts.get_host(platform.ctx, "box-1")).link_state is LinkState.UP and h.id,
        "box-1 linked",
    )


def _faults(platform: Platform) -> list[GpuFaultModel]:
    with platform.ctx.reader() as session:
        return list(session.scalars(select(GpuFaultModel).order_by(GpuFaultModel.id)))


def _gpu_state(platform: Platform, uuid: str) -> GpuState:
    with platform.ctx.reader() as session:
        gpu = session.get(GpuDeviceModel, uuid)
        assert gpu is not None
        return gpu.state


def test_an_xid_on_the_agents_host_is_a_fault_on_the_server_at_once(
    rig: LinkRig, platform: Platform
) -> None:
    nvml = h200_1x()
    _enroll(rig, platform, nvml)
    uuid = nvml.devices[0].uuid
    nvml.inject_xid(0, 79)
    # The heartbeat is every 30 s: the fault goes out in one of its own.
    (fault,) = wait_for(lambda: _faults(platform), "the Xid recorded")
    assert (fault.gpu_id, fault.kind, fault.xid, fault.source) == (uuid, "xid", 79, "agent")
    assert fault.message == "Xid 79 (GPU has fallen off the bus)"
    assert _gpu_state(platform, uuid) is not GpuState.HEALTHY  # no tenant: unhealthy
    wait_for(lambda: rig.journal("a").pending() == [], "the agent's journal acknowledged")


def test_faults_journaled_while_the_agent_was_down_arrive_after_it_returns_once(
    rig: LinkRig, platform: Platform
) -> None:
    nvml = h200_1x()
    host_id = _enroll(rig, platform, nvml)
    uuid = nvml.devices[0].uuid
    rig.halt("a")
    wait_for(lambda: hosts.get_host(platform.ctx, "box-1").link_state is LinkState.DOWN, "down")
    # What its watcher journaled before the agent was killed, an hour ago.
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    HealthJournal(rig.state_dir("a"), clock=lambda: an_hour_ago).record(
        [HealthEvent(uuid, "xid", 48)]
    )
    rig.rerun("a", nvml)
    (fault,) = wait_for(lambda: _faults(platform), "the journaled Xid recorded")
    assert (fault.xid, fault.host_id, fault.source) == (48, host_id, "agent")
    assert f"seen by the host's agent at {an_hour_ago:%Y-%m-%d %H:%M}" in fault.message
    wait_for(lambda: rig.journal("a").pending() == [], "the agent's journal acknowledged")
    assert len(_faults(platform)) == 1


def _record(seq: int, uuid: str, xid: int) -> HealthRecord:
    return HealthRecord(seq=seq, gpu_uuid=uuid, kind="xid", xid=xid, seen_at=datetime.now(UTC))


def test_a_record_sent_again_is_recorded_once_and_another_hosts_gpu_never(
    rig: LinkRig, platform: Platform
) -> None:
    nvml = h200_1x()
    host_id = _enroll(rig, platform, nvml)
    own = nvml.devices[0].uuid
    with platform.ctx.reader() as session:
        foreign = session.scalars(
            select(GpuDeviceModel.id).where(GpuDeviceModel.host_id != host_id)
        ).first()
    assert foreign is not None
    sent = [_record(1, own, 13), _record(2, foreign, 79)]
    assert record_agent_health(platform.ctx, host_id, sent) == 2
    assert record_agent_health(platform.ctx, host_id, sent) == 2  # its ack was lost
    assert [(f.gpu_id, f.xid) for f in _faults(platform)] == [(own, 13)]
    assert _gpu_state(platform, foreign) is GpuState.HEALTHY
