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

from fastapi import APIRouter

from gpudock.db.models import UserModel
from gpudock.services.context import ServiceContext
from gpudock.settings import Settings


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
    OptionalPage("billing", "Billing", "/billing", "gpudock.services.billing"),
    OptionalPage("images", "Images", "/images", "gpudock.services.images"),
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


def balance(ctx: ServiceContext, user: UserModel) -> str | None:
    """The user's available balance with its currency, once billing is installed."""
    if not _exists("gpudock.services.billing"):
        return None
    from gpudock.billing.money import format_amount
    from gpudock.services import billing

    return f"{format_amount(billing.summary(ctx, user).available)} {ctx.settings.currency}"
