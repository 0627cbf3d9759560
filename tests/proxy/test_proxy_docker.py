"""Start JupyterLab on an image without it (the base image): it says what is
missing, through the service and the console's card. (The services image
end to end: test_services_browser.py.)"""

from __future__ import annotations

import docker
import pytest

from gpudock.db.models import InstanceStatus
from gpudock.errors import Conflict
from gpudock.services.accounts import logins, users
from gpudock.services.instances import actions, launch
from gpudock.services.instances.actions import InstanceRequest
from tests.support.platforms import PlatformFactory
from tests.support.web import CHEAP, PASSWORD, log_in

pytestmark = pytest.mark.docker


def test_start_jupyter_on_an_image_without_it_says_what_is_missing(
    docker_platform_factory: PlatformFactory, engine: docker.DockerClient
) -> None:
    logins.configure_hashing(CHEAP)
    platform = docker_platform_factory(stop_timeout_s=1)
    alice = users.create_user(platform.ctx, "alice")
    logins.set_password(platform.ctx, "alice", PASSWORD)
    request = InstanceRequest(gpu_model=None, gpu_count=0, name="plain")
    created = actions.create_instance(platform.ctx, alice.user, request)
    for _ in range(200):
        platform.reconciler.drain()
        if (
            actions.get_instance(platform.ctx, alice.user, created.id).status
            == InstanceStatus.RUNNING
        ):
            break

    with pytest.raises(Conflict, match=r"missing: jupyter-lab is not on PATH.*installs nothing"):
        launch.start_service(platform.ctx, alice.user, "plain", "jupyter")
    card = log_in(platform, "alice").post(f"/instances/{created.id}/services/jupyter/start")
    assert card.status_code == 200  # the console's card says it where the button was
    assert "jupyter-lab is not on PATH" in card.text and 'id="services-error"' in card.text
