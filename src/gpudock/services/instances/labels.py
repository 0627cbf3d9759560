"""Host labels an instance asks for: checked at create, kept on the row, and
matched by the scheduler against the labels the operator set on hosts
(`services.agents.hosts.label_host`; `scheduler.placement.carries_labels`).

A request no labelled host could ever hold is refused at create, saying why,
rather than left to wait for ever: none carries the labels, or none of those
that do has the GPUs it asks for.
"""

from __future__ import annotations

import json
from collections import Counter

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock import syntax
from gpudock.db.models import AgentHostModel, GpuDeviceModel
from gpudock.errors import InvalidRequest
from gpudock.messages import Message


def check_host_labels(
    session: Session, labels: dict[str, str], models: tuple[str, ...], gpu_count: int
) -> None:
    """`InvalidRequest` unless some host carrying every label has `gpu_count` GPUs
    (at least one, for a share) of one of `models`; no labels: nothing to check."""
    if not labels:
        return
    problem = syntax.labels_problem(labels)
    if problem is not None:
        raise InvalidRequest(problem, field="host_labels")
    wanted = set(labels.items())
    shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    carrying = [
        host_id
        for host_id, text in session.execute(select(AgentHostModel.id, AgentHostModel.labels))
        if wanted <= set(json.loads(text or "{}").items())
    ]
    if not carrying:
        raise InvalidRequest(
            Message(
                "no host carries the labels {labels} (`gpudock hosts list` shows them)",
                labels=shown,
            ),
            field="host_labels",
        )
    if not models:
        return
    per_host = Counter(
        session.scalars(
            select(GpuDeviceModel.host_id).where(
                GpuDeviceModel.host_id.in_(carrying),
                GpuDeviceModel.model.in_(models),
                GpuDeviceModel.present.is_(True),
            )
        )
    )
    most = max(per_host.values(), default=0)
    if most < max(gpu_count, 1):
        raise InvalidRequest(
            Message(
                "no host labelled {labels} has {count} × {models}: the most one has is {most}",
                labels=shown,
                count=max(gpu_count, 1),
                models=" or ".join(models),
                most=most,
            ),
            field="host_labels",
        )
