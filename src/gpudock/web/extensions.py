"""Where the pages of capabilities that land later slot in.

A navigation entry appears when both the capability's service module and its
console page module exist: the SSH-keys, billing and images issues each add a
`gpudock/web/pages_<key>.py` with a `router` (mounted by `console.py` when
present) and their entry here lights up. Nothing else in the console changes.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from fastapi import APIRouter

from gpudock.db.models import SshSessionModel, UserModel
from gpudock.services.context import ServiceContext
from gpudock.settings import Settings

if TYPE_CHECKING:
    from gpudock.services import web_queries


@dataclass(frozen=True)
class OptionalPage:
    key: str
    label: str  # an English catalog key (see i18n.py)
    path: str
    service: str
    admin_only: bool = False

    @property
    def page_module(self) -> str:
        return f"gpudock.web.pages_{self.key}"


OPTIONAL_PAGES = (
    OptionalPage("ssh_keys", "SSH keys", "/ssh-keys", "gpudock.services.ssh_keys"),
    OptionalPage("tokens", "API tokens", "/tokens", "gpudock.services.tokens"),
    OptionalPage("billing", "Billing", "/billing", "gpudock.services.billing"),
    OptionalPage("images", "Images", "/images", "gpudock.services.images"),
    OptionalPage(
        "billing_admin",
        "Prices & top-ups",
        "/admin/billing",
        "gpudock.services.billing",
        admin_only=True,
    ),
    OptionalPage(
        "health",
        "Reliability",
        "/admin/reliability",
        "gpudock.services.reliability",
        admin_only=True,
    ),
)


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@cache
def present_pages() -> tuple[OptionalPage, ...]:
    return tuple(p for p in OPTIONAL_PAGES if _exists(p.service) and _exists(p.page_module))


def nav_entries(is_admin: bool) -> list[OptionalPage]:
    return [p for p in present_pages() if is_admin or not p.admin_only]


def optional_routers() -> list[APIRouter]:
    routers = []
    for page in present_pages():
        router = getattr(importlib.import_module(page.page_module), "router", None)
        if isinstance(router, APIRouter):
            routers.append(router)
    return routers


def ssh_command(settings: Settings, instance_id: str) -> str | None:
    """`ssh -p PORT <instance-id>@HOST` once the SSH gateway (issue 3) is installed.

    Without it there is no user-facing way in and the console shows none: the
    operator's `docker exec` hint is not for users.
    """
    if not _exists("gpudock.services.ssh_endpoint"):
        return None
    from gpudock.services import ssh_endpoint

    return ssh_endpoint.ssh_command(settings, instance_id)


def gpu_prices(ctx: ServiceContext) -> dict[str, str] | None:
    """{GPU model: price per GPU-hour} once billing (issue 4) is installed, else None."""
    if not _exists("gpudock.services.billing"):
        return None
    from gpudock.services import billing

    return billing.gpu_prices_per_hour(ctx)


def estimate_per_hour(ctx: ServiceContext, gpu_model: str | None, gpu_count: int) -> str | None:
    """What this shape would cost per hour now, with the currency; None without billing."""
    if not _exists("gpudock.services.billing"):
        return None
    from gpudock.billing.money import format_amount
    from gpudock.services import web_queries

    estimate = web_queries.estimate(ctx, gpu_model, gpu_count)
    return f"{format_amount(estimate.per_hour)} {ctx.settings.currency}"


def has_page(key: str) -> bool:
    return any(p.key == key for p in present_pages())


def ssh_sessions(
    ctx: ServiceContext, user: UserModel, instance_id: str, limit: int = 20
) -> list[SshSessionModel] | None:
    """The instance's SSH audit trail, newest first, once the gateway is installed."""
    if not _exists("gpudock.services.ssh_sessions"):
        return None
    from gpudock.services import ssh_sessions

    return ssh_sessions.list_sessions(ctx, user, instance_id, limit)


def balance(ctx: ServiceContext, user: UserModel) -> str | None:
    """The user's available balance with its currency, once billing is installed."""
    if not _exists("gpudock.services.billing"):
        return None
    from gpudock.billing.money import format_amount
    from gpudock.services import billing

    return f"{format_amount(billing.summary(ctx, user).available)} {ctx.settings.currency}"


def image_hint(
    ctx: ServiceContext, user: UserModel, image: str, gpu_model: str | None
) -> web_queries.ImageHint | None:
    """Whether `image` runs on `gpu_model` here, once the images catalog is installed."""
    if not image or not _exists("gpudock.services.images"):
        return None
    from gpudock.services import web_queries

    return web_queries.image_hint(ctx, user, image, gpu_model)


def image_choices(ctx: ServiceContext, user: UserModel) -> list[tuple[str, str]]:
    """(reference, name) of the images the user may pick, for the form's suggestions."""
    if not _exists("gpudock.services.images"):
        return []
    from gpudock.services import images

    return [(s.reference, s.name) for s in images.list_images(ctx, user)]
