"""How both ends of an agent link set up SSH for bulk data: one place, so that
the agent and the server agree.

- Cipher: AES-GCM first. The link is between two asyncssh ends, so what is
  cheapest for `cryptography` wins: AES-GCM is one call per packet on the
  CPU's AES instructions, where OpenSSH's chacha20-poly1305 (asyncssh's
  first choice) is a cipher and a MAC computed apart, several calls per packet.
- Packets and windows: every SSH packet costs Python work on both ends
  (framing, a crypto call, a channel callback), so the link's channels carry
  256 KiB packets instead of 32 KiB, with an 8 MiB window so that a channel
  keeps moving over a link with some latency. OpenSSH clients never see
  these: they speak to the SSH gateway, not to the link.
"""

from __future__ import annotations

from typing import Any

ENCRYPTION_ALGS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
)
WINDOW = 8 << 20
MAX_PACKET = 256 << 10


def connection_options() -> dict[str, Any]:
    """The asyncssh connection options both ends of a link pass."""
    return {"encryption_algs": list(ENCRYPTION_ALGS), "window": WINDOW, "max_pktsize": MAX_PACKET}
