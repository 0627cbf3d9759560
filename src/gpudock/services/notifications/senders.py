"""The two ways out: an HTTP POST to a webhook and a message to the SMTP
server the operator configured. Each call has a deadline and returns what the
other side answered, or raises `SendFailed` with a reason a user can read in
the delivery log."""

from __future__ import annotations

import ipaddress
import smtplib
import socket
import ssl
import time
from dataclasses import dataclass
from email.message import EmailMessage
from urllib.parse import urlsplit

import httpx

from gpudock.services.notifications import signing
from gpudock.settings import Settings

MAX_RESULT = 200  # characters of an answer kept in the log


class SendFailed(Exception):
    """The delivery did not go through; the message goes into the delivery log."""


@dataclass(frozen=True)
class Outgoing:
    delivery_id: str
    channel: str  # "webhook" or "email"
    kind: str
    body: bytes  # the JSON document a webhook receives
    subject: str
    text: str  # an email's body
    target: str  # URL or address
    secret: str | None


PRIVATE_TARGETS_SETTING = "GPUDOCK_WEBHOOK_PRIVATE_TARGETS"


def private_target_refusal(host: str, address: str) -> str:
    return (
        f"{host} is {address}, an address of the server's own network (loopback, private "
        f"or link-local): webhooks go to public addresses only, unless the operator sets "
        f"{PRIVATE_TARGETS_SETTING}=true"
    )


def check_public_target(url: str) -> None:
    """Refuse a URL whose host resolves to a non-public address: the server
    sits inside the operator's network, and a webhook must not be a way to
    probe it. Checked at every send, since a name can change what it points at."""
    host = urlsplit(url).hostname or ""
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise SendFailed(f"cannot resolve {host}: {exc}") from exc
    for *_, sockaddr in found:
        address = str(sockaddr[0]).split("%", 1)[0]  # an IPv6 scope is not part of it
        if not ipaddress.ip_address(address).is_global:
            raise SendFailed(private_target_refusal(host, address))


def send_webhook(outgoing: Outgoing, timeout_s: float, *, allow_private: bool = False) -> str:
    """POST the signed JSON; any 2xx is delivered. Redirects are not followed
    (the signature is for the URL the user registered)."""
    if not allow_private:
        check_public_target(outgoing.target)
    stamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "gpudock-webhooks",
        signing.DELIVERY_HEADER: outgoing.delivery_id,
        signing.KIND_HEADER: outgoing.kind,
        signing.TIMESTAMP_HEADER: str(stamp),
        signing.SIGNATURE_HEADER: signing.signature(outgoing.secret or "", stamp, outgoing.body),
    }
    try:
        response = httpx.post(
            outgoing.target,
            content=outgoing.body,
            headers=headers,
            timeout=timeout_s,
            follow_redirects=False,
        )
    except httpx.TimeoutException as exc:
        raise SendFailed(f"no answer within {timeout_s:g} s") from exc
    except httpx.HTTPError as exc:
        raise SendFailed(_short(f"cannot reach {outgoing.target}: {exc}")) from exc
    result = f"HTTP {response.status_code}"
    if not response.is_success:
        raise SendFailed(_short(f"{result} {response.text.strip()}".strip()))
    return result


def send_email(settings: Settings, outgoing: Outgoing) -> str:
    """Hand the message to the operator's SMTP server."""
    if not settings.smtp_host:
        raise SendFailed("no SMTP server is configured (the operator sets GPUDOCK_SMTP_HOST)")
    message = EmailMessage()
    message["From"] = settings.smtp_from
    message["To"] = outgoing.target
    message["Subject"] = outgoing.subject
    message["Message-ID"] = f"<{outgoing.delivery_id}@gpudock>"
    message[signing.DELIVERY_HEADER] = outgoing.delivery_id
    message.set_content(outgoing.text)
    try:
        with smtplib.SMTP(
            settings.smtp_host, settings.smtp_port, timeout=settings.notify_timeout_s
        ) as smtp:
            if settings.smtp_starttls:
                smtp.starttls(context=ssl.create_default_context())
            if settings.smtp_username:
                password = (
                    settings.smtp_password.get_secret_value() if settings.smtp_password else ""
                )
                smtp.login(settings.smtp_username, password)
            refused = smtp.send_message(message)
    except (smtplib.SMTPException, OSError) as exc:  # timeouts are OSErrors
        raise SendFailed(_short(f"SMTP {settings.smtp_host}:{settings.smtp_port}: {exc}")) from exc
    if refused:
        raise SendFailed(_short(f"SMTP refused {', '.join(refused)}"))
    return "accepted by SMTP"


def _short(text: str) -> str:
    return text if len(text) <= MAX_RESULT else text[: MAX_RESULT - 1] + "…"
