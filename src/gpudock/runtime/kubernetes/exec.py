"""Sessions in pods: pod exec over WebSocket (`v5.channel.k8s.io`, else
`v4.channel.k8s.io`, as the apiserver chooses), bridged to the plain sockets
`runtime.base.ExecStream` promises the SSH gateway.

Two threads per session: one reads the WebSocket (stdout and stderr onto
their sockets, the final `Status` into the exit code), one reads what the
caller writes (stdin onto channel 0; its end as v5's close of channel 0).
Kubernetes exec has no environment of its own, so `env` runs the command
through `env NAME=value ...`.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from kubernetes.stream import stream
from websocket import ABNF, WebSocketException

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import ExecResult, ExecStream, RawOutput
from gpudock.runtime.kubernetes.api import KubeApi

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
V5 = "v5.channel.k8s.io"


@dataclass
class _Session:
    websocket: Any  # websocket-client's WebSocket
    protocol: str
    exit_code: int | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def send(self, channel: int, data: bytes) -> None:
        self.websocket.send(bytes([channel]) + data, opcode=ABNF.OPCODE_BINARY)


def exit_code_of(status: dict[str, Any]) -> int:
    if status.get("status") == "Success":
        return 0
    causes = (status.get("details") or {}).get("causes") or []
    for cause in causes:
        if cause.get("reason") == "ExitCode":
            return int(cause.get("message", 1))
    return 1


class PodExecs:
    def __init__(self, api: KubeApi) -> None:
        self._api = api
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def open(
        self,
        namespace: str,
        pod: str,
        command: list[str],
        tty: bool,
        env: dict[str, str],
        *,
        stderr_apart: bool = True,
    ) -> ExecStream:
        """`stderr_apart`: stderr on `err_sock` (without a terminal); else with stdout."""
        if env:
            command = ["env", *(f"{k}={v}" for k, v in sorted(env.items())), *command]
        client = stream(
            self._api.core.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=command,
            stdin=True,
            stdout=True,
            stderr=True,
            tty=tty,
            binary=True,
            _preload_content=False,
        )
        session = _Session(client.sock, str(client.subprotocol or ""))
        caller, ours = socket.socketpair()
        apart = stderr_apart and not tty
        err_caller, err_ours = socket.socketpair() if apart else (None, None)
        exec_id = secrets.token_hex(8)
        with self._lock:
            self._sessions[exec_id] = session
        threading.Thread(
            target=self._pump_output, args=(session, ours, err_ours), daemon=True
        ).start()
        threading.Thread(target=self._pump_input, args=(session, ours), daemon=True).start()
        caller.setblocking(False)
        if err_caller is not None:
            err_caller.setblocking(False)
        return ExecStream(exec_id, caller, b"", RawOutput(), tty, err_caller)

    def _pump_output(
        self, session: _Session, out: socket.socket, err: socket.socket | None
    ) -> None:
        try:
            while True:
                opcode, data = session.websocket.recv_data()
                if opcode == ABNF.OPCODE_CLOSE or not data:
                    break
                channel, payload = data[0], bytes(data[1:])
                if channel == STDOUT or (channel == STDERR and err is None):
                    out.sendall(payload)
                elif channel == STDERR and err is not None:
                    err.sendall(payload)
                elif channel == ERROR:
                    session.exit_code = exit_code_of(json.loads(payload or b"{}"))
        except (WebSocketException, OSError, ValueError):
            pass  # the connection ended: what was read is the output
        finally:
            if session.exit_code is None:  # no Status: the connection broke
                session.exit_code = 1
            session.done.set()
            for end in (out, err):
                if end is not None:
                    with contextlib.suppress(OSError):  # the caller closed it already
                        end.shutdown(socket.SHUT_WR)

    def _pump_input(self, session: _Session, ours: socket.socket) -> None:
        try:
            while data := ours.recv(65536):
                session.send(STDIN, data)
            if session.protocol == V5:
                session.send(CLOSE, bytes([STDIN]))
        except (WebSocketException, OSError):
            pass  # the process ended first

    def run(
        self, namespace: str, pod: str, command: list[str], stdin: bytes, timeout_s: float
    ) -> ExecResult:
        """`command` to completion with `stdin` as its input: its exit code and
        output (stdout and stderr together, as Docker's exec gives them)."""
        opened = self.open(namespace, pod, command, tty=False, env={}, stderr_apart=False)
        try:
            opened.sock.setblocking(True)
            opened.sock.settimeout(timeout_s)
            opened.sock.sendall(stdin)
            opened.sock.shutdown(socket.SHUT_WR)
            output = b""
            while chunk := opened.sock.recv(65536):
                output += chunk
        except TimeoutError as exc:
            raise RuntimeFailure(f"{command[0]} in pod {pod} ran past {timeout_s:g} s") from exc
        finally:
            opened.sock.close()
        session = self._sessions.pop(opened.exec_id)
        session.done.wait(timeout_s)
        return ExecResult(exit_code=session.exit_code or 0, output=output)

    def finish(self, exec_id: str, timeout_s: float) -> int | None:
        """The exit code once the process has ended (None if it has not within
        `timeout_s`); the session is forgotten."""
        session = self._sessions.pop(exec_id, None)
        if session is None:
            raise RuntimeFailure(f"no such exec: {exec_id}")
        return session.exit_code if session.done.wait(timeout_s) else None

    def resize(self, exec_id: str, width: int, height: int) -> None:
        session = self._sessions.get(exec_id)
        if session is None or session.done.is_set():
            return
        with contextlib.suppress(WebSocketException, OSError):  # it has just ended
            session.send(RESIZE, json.dumps({"Width": width, "Height": height}).encode())

    def exit_code(self, exec_id: str) -> int | None:
        session = self._sessions.get(exec_id)
        if session is None:
            raise RuntimeFailure(f"no such exec: {exec_id}")
        return session.exit_code if session.done.is_set() else None
