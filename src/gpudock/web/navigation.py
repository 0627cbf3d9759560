"""The console's navigation: the pages beside the instances, in menu order."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NavEntry:
    key: str
    label: str  # an English catalog key (see i18n.py)
    path: str
    admin_only: bool = False


NAV_ENTRIES = (
    NavEntry("ssh_keys", "SSH keys", "/ssh-keys"),
    NavEntry("tokens", "API tokens", "/tokens"),
    NavEntry("billing", "Billing", "/billing"),
    NavEntry("notifications", "Notifications", "/notifications"),
    NavEntry("images", "Images", "/images"),
    NavEntry("billing_admin", "Prices & top-ups", "/admin/billing", admin_only=True),
    NavEntry("health", "Reliability", "/admin/reliability", admin_only=True),
    NavEntry("utilisation", "GPU utilisation", "/admin/utilisation", admin_only=True),
)


def nav_entries(is_admin: bool) -> list[NavEntry]:
    return [e for e in NAV_ENTRIES if is_admin or not e.admin_only]
