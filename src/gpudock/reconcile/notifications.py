"""The notification pass: fire GPU watches whose model has free GPUs, then
send the deliveries that are due. It runs on a thread of its own
(`gpudock-notifications`): a webhook may take its whole timeout, and neither
placement nor a request ever waits on one."""

from __future__ import annotations

from gpudock.services.context import ServiceContext
from gpudock.services.notifications.delivery import DeliveryReport, deliver_due
from gpudock.services.notifications.gpu_watches import fire_watches


def notification_pass(ctx: ServiceContext) -> DeliveryReport:
    fire_watches(ctx)
    return deliver_due(ctx)
