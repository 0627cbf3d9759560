"""Starting JupyterLab or TensorBoard in a running instance ("Start JupyterLab").

Runs `gpudock-service NAME` (`gpudock.images.service_image`'s launcher, passed
to the image's own `sh`) with the instance's service token and URL prefix,
then publishes the port. Nothing is installed: an image without the program
gets a 409 that names what is missing and where to get it.
"""

from __future__ import annotations

import secrets

from sqlalchemy import update

from gpudock.db.models import InstanceModel, UserModel
from gpudock.errors import Conflict, InvalidRequest, RuntimeFailure
from gpudock.images.catalog import SERVICES_IMAGE
from gpudock.images.service_image import launcher_script
from gpudock.services.context import ServiceContext
from gpudock.services.instances import actions, published
from gpudock.services.instances.published import BUILTIN_PORTS, PublishedService
from gpudock.services.instances.status import S

MISSING = 127


def _service_token(ctx: ServiceContext, instance: InstanceModel) -> str:
    """The instance's token; made now for instances from before service URLs."""
    if instance.service_token:
        return instance.service_token
    token = secrets.token_urlsafe(32)
    with ctx.sessions.begin() as session:
        session.execute(
            update(InstanceModel)
            .where(InstanceModel.id == instance.id, InstanceModel.service_token.is_(None))
            .values(service_token=token)
        )
        stored = session.get(InstanceModel, instance.id)
        return stored.service_token if stored and stored.service_token else token


def start_service(ctx: ServiceContext, user: UserModel, ref: str, name: str) -> PublishedService:
    instance = actions.get_instance(ctx, user, ref)  # another tenant's: 404 before all else
    if name not in BUILTIN_PORTS:
        known = " or ".join(sorted(BUILTIN_PORTS))
        raise InvalidRequest(f"gpudock starts {known}, not {name!r}", field="name")
    if instance.status != S.RUNNING or not instance.container_id:
        raise Conflict(
            f"instance {instance.name} is {instance.status.value}: "
            f"`gpudock instances start {instance.name}` first"
        )
    command = [
        "env",
        f"GPUDOCK_SERVICE_TOKEN={_service_token(ctx, instance)}",
        f"GPUDOCK_SERVICE_PREFIX={published.url_prefix(ctx.settings, instance.id)}",
        "sh",
        "-c",
        launcher_script(),
        "gpudock-service",
        name,
    ]
    runtime = ctx.runtime_for(instance.host_id)  # where its container runs
    result = runtime.exec_in_container(instance.container_id, command)
    said = result.output.decode(errors="replace").strip().splitlines()
    if result.exit_code == MISSING:
        missing = said[-1] if said else f"{name} is not installed"
        raise Conflict(
            f"{instance.name} ({instance.image}) cannot start {name}: {missing}. gpudock "
            f"installs nothing into your image: install it in the instance (pip install), "
            f"or create an instance from {SERVICES_IMAGE}"
        )
    if result.exit_code != 0:
        raise RuntimeFailure(f"starting {name} in {instance.name} failed: {' '.join(said[-3:])}")
    return published.publish(ctx, user, instance.id, BUILTIN_PORTS[name], name)
