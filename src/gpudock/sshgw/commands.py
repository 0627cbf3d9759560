"""What the gateway runs inside an instance for each kind of SSH channel.

Like sshd, a session starts in $HOME with the login shell (bash if the image has
it, else sh): a shell request gets a login shell, `ssh host CMD` gets `SHELL -c
CMD`, the sftp subsystem gets the image's sftp-server (so sftp, scp and rsync
work against the instance's own filesystem), and a `-L` forward gets a small
relay that connects to the port inside the instance.
"""

from __future__ import annotations

_HOME = 'cd "$HOME" 2>/dev/null || cd /; '
_LOGIN_SHELL = _HOME + "if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l"
_RUN = _HOME + 'if [ -x /bin/bash ]; then exec /bin/bash -c "$1"; fi; exec /bin/sh -c "$1"'
SFTP_SERVERS = (
    "/usr/lib/openssh/sftp-server",
    "/usr/libexec/openssh/sftp-server",
    "/usr/lib/ssh/sftp-server",
    "/usr/libexec/sftp-server",
    "/usr/lib/sftp-server",
)
_SFTP = (
    _HOME
    + f'for p in {" ".join(SFTP_SERVERS)}; do [ -x "$p" ] && exec "$p"; done; '
    + 'echo "gpudock: this image has no sftp-server, so sftp and scp cannot work; install '
    + 'openssh-sftp-server (Debian, Ubuntu) or openssh-server (others) in the instance" >&2; '
    + "exit 127"
)
# Connects to HOST:PORT inside the instance, answers one NUL byte once connected
# (or an error on stderr), then copies stdin to the socket and the socket to stdout.
_RELAY = r"""
import os, socket, sys, threading
host, port = sys.argv[1], int(sys.argv[2])
try:
    conn = socket.create_connection((host, port), timeout=10)
except OSError as exc:
    sys.stderr.write(f"{exc.strerror or exc}\n")
    sys.exit(1)
conn.settimeout(None)
out = sys.stdout.buffer
out.write(b"\0")
out.flush()
def upstream():
    while True:
        data = os.read(0, 65536)
        if not data:
            try:
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            return
        conn.sendall(data)
threading.Thread(target=upstream, daemon=True).start()
while True:
    data = conn.recv(65536)
    if not data:
        break
    out.write(data)
    out.flush()
"""
_RELAY_LAUNCH = (
    'command -v python3 >/dev/null 2>&1 || { echo "port forwarding needs python3 in the '
    'instance\'s image" >&2; exit 127; }; exec python3 -c "$0" "$1" "$2"'
)


def login_shell() -> list[str]:
    return ["/bin/sh", "-c", _LOGIN_SHELL]


def run_command(command: str) -> list[str]:
    return ["/bin/sh", "-c", _RUN, "sh", command]


def sftp_server() -> list[str]:
    return ["/bin/sh", "-c", _SFTP]


def port_relay(host: str, port: int) -> list[str]:
    return ["/bin/sh", "-c", _RELAY_LAUNCH, _RELAY, host, str(port)]
