"""Attached exec streams: the SSH gateway's data path into containers.

`DockerRuntime` calls these inside its error translation
(`gpudock.runtime.docker.translate`); docker-py exceptions raised here are
translated there.

Two paths, chosen per stream by `ExecStreams`:

- **runc, directly** (`RuncExec`): a stream without a terminal (sftp, scp,
  rsync, `ssh host cmd`, `-L` relays) into a container of a *local* engine,
  when the server runs as root. The process is started by the very `runc`
  binary, state directory and process spec that `docker exec` would have
  containerd's shim use, so it is confined exactly like a `docker exec`
  process (same namespaces, cgroups, capability sets, no_new_privs, seccomp
  filter, AppArmor/SELinux label, rlimits, user, working directory; tests/sshgw
  compare them), but its bytes no longer pass through dockerd and the shim
  (about 5 CPU-s per GiB on the benchmark machine), and stdout and stderr come
  on their own sockets, unframed.
- **`docker exec`** over the engine's API for everything else: terminals
  (their resizes go through the exec API), remote engines, a server that is
  not root, or a container whose runc state cannot be found.

The engine hijacks the HTTP connection of `POST /exec/{id}/start`: from then on
the socket carries the process's stdin one way and its output the other way,
unframed with a TTY and in Docker's 8-byte-header frames without one. We take
the socket out of docker-py (a `dup` of it, so closing docker-py's objects
returns its connection slot to the pool) and hand it over non-blocking, with
any output that docker-py's HTTP reader had already buffered.
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import STDERR, STDOUT, ExecStream, RawOutput

_FRAME_HEADER = struct.Struct(">BxxxL")
_DOCKER_STDERR = 2


class DockerFrames:
    """Docker's multiplexed output: a header (stream, 3 zero bytes, big-endian
    length) before each payload. Payloads are passed on as they arrive, not
    held back until a frame is complete."""

    def __init__(self) -> None:
        self._pending = b""  # an incomplete header
        self._stream = STDOUT
        self._remaining = 0  # payload bytes still to come in the current frame

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buffer = self._pending + data if self._pending else data
        pieces: list[tuple[int, bytes]] = []
        position, end = 0, len(buffer)
        while True:
            if self._remaining:
                take = min(self._remaining, end - position)
                if take:
                    pieces.append((self._stream, buffer[position : position + take]))
                position += take
                self._remaining -= take
                if self._remaining:
                    break
            if end - position < _FRAME_HEADER.size:
                break
            kind, self._remaining = _FRAME_HEADER.unpack_from(buffer, position)
            self._stream = STDERR if kind == _DOCKER_STDERR else STDOUT
            position += _FRAME_HEADER.size
        self._pending = buffer[position:]
        return pieces


def open_exec_stream(
    api: docker.APIClient, container_id: str, command: list[str], tty: bool, env: dict[str, str]
) -> ExecStream:
    created = api.exec_create(
        container_id, command, stdin=True, stdout=True, stderr=True, tty=tty, environment=env
    )
    exec_id = str(created["Id"])
    attached = api.exec_start(exec_id, tty=tty, socket=True)
    sock, initial = _take_socket(attached)
    return ExecStream(
        exec_id=exec_id,
        sock=sock,
        initial=initial,
        decoder=RawOutput() if tty else DockerFrames(),
        tty=tty,
    )


def _take_socket(attached: Any) -> tuple[socket.socket, bytes]:
    """A non-blocking duplicate of the hijacked socket, and what was buffered."""
    raw = getattr(attached, "_sock", attached)  # socket.SocketIO wraps the socket
    if isinstance(raw, ssl.SSLSocket) or not isinstance(raw, socket.socket):
        attached.close()
        raise RuntimeFailure(
            "SSH sessions need the Docker Engine on a Unix socket or plain TCP "
            "(GPUDOCK_DOCKER_HOST with TLS is not supported for them)"
        )
    raw.setblocking(False)  # so that reading what is buffered below cannot wait
    sock = raw.dup()
    sock.setblocking(False)
    response = getattr(attached, "_response", None)
    initial = b""
    if response is not None:
        # http.client may have read past the response headers into its buffer.
        buffered = response.raw._fp.fp
        initial = buffered.read1(1 << 16) or b""
        response.close()  # returns docker-py's (now closed) connection to its pool
    attached.close()
    return sock, initial


def resize_exec(api: docker.APIClient, exec_id: str, width: int, height: int) -> None:
    try:
        api.exec_resize(exec_id, height=height, width=width)
    except docker.errors.APIError as exc:
        if exc.status_code in (404, 409, 500):  # ended, or not started with a TTY
            return
        raise


def exec_exit_code(api: docker.APIClient, exec_id: str) -> int | None:
    info = api.exec_inspect(exec_id)
    if info.get("Running"):
        return None
    code = info.get("ExitCode")
    return None if code is None else int(code)


# -- choosing the path ---------------------------------------------------------------
def engine_is_local(base_url: str | None) -> bool:
    """True when the engine is reached over a Unix socket (so runs on this host)."""
    url = base_url or os.environ.get("DOCKER_HOST") or "unix://"
    return url.startswith("unix://")


class ExecStreams:
    """The exec streams of one engine: through runc where `RuncExec` can, else
    `docker exec`. Thread-safe (the gateway calls from its thread pool)."""

    def __init__(self, api: docker.APIClient, *, local: bool) -> None:
        self._api = api
        self._runc = RuncExec() if local and RuncExec.usable() else None

    def open(
        self, container_id: str, command: list[str], tty: bool, env: dict[str, str]
    ) -> ExecStream:
        if self._runc is not None and not tty:
            target = self._runc.find(container_id)
            if target is not None and self._engine_agrees(container_id, target):
                return self._runc.open(target, command, env)
        return open_exec_stream(self._api, container_id, command, tty, env)

    def _engine_agrees(self, container_id: str, target: RuncTarget) -> bool:
        """The engine runs this container with the init process found in runc's
        state: the state is this engine's and is current."""
        state = self._api.inspect_container(container_id).get("State") or {}
        return bool(state.get("Running")) and state.get("Pid") == target.init_pid

    def resize(self, exec_id: str, width: int, height: int) -> None:
        if not RuncExec.owns(exec_id):  # runc streams have no terminal
            resize_exec(self._api, exec_id, width, height)

    def exit_code(self, exec_id: str) -> int | None:
        if RuncExec.owns(exec_id):
            return self._runc.exit_code(exec_id) if self._runc is not None else None
        return exec_exit_code(self._api, exec_id)


# -- runc, directly ----------------------------------------------------------------
# Where containerd keeps the bundles of Docker's containers (namespace "moby"):
# the containerd that dockerd starts itself, then a system containerd.
CONTAINERD_STATE_DIRS = (Path("/run/docker/containerd/daemon"), Path("/run/containerd"))
BUNDLES = "io.containerd.runtime.v2.task/moby"
RUNC_SHIM = "containerd-shim-runc-v2"
RUNC_DEFAULT_ROOT = "/run/containerd/runc"  # the shim's default without options.json
RUNC_PREFIX = "runc-"
UNCLAIMED_EXIT_KEPT_S = 300.0  # an exit status nobody asked for is forgotten after this
EXEC_SOCKET_BUFFER = 2 << 20
SO_SNDBUFFORCE = 32  # Linux; not in Python's socket module


@dataclass(frozen=True)
class RuncTarget:
    """How the shim would run `docker exec` in one container."""

    container_id: str
    binary: str  # the runtime binary the shim calls (options.json's binary_name)
    root: str  # its state root (`runc --root`)
    process: dict[str, Any]  # the container's OCI process: what `docker exec` starts from
    init_pid: int


@dataclass
class _Started:
    process: subprocess.Popen[bytes]
    ended_at: float | None = None


class RuncExec:
    """`runc exec` of a process spec built exactly as dockerd builds one for
    `docker exec` (daemon/exec.go): the container's own process spec from its
    bundle, with the command as `args`, the container's environment with the
    session's variables replacing or appended (`ReplaceOrAppendEnvValues`),
    and no terminal. Everything that confines the process (capabilities,
    no_new_privs, AppArmor/SELinux, rlimits, OOM score, user) comes from that
    spec; namespaces, cgroups and the seccomp filter come from runc's state of
    the container, as for any exec.

    The process gets our sockets as its stdio (stdin and stdout one socket,
    stderr another): `runc exec --detach`, as the shim runs it, so no process
    relays its bytes. Its exit status is collected as the shim collects it: it
    is runc's child, and when runc exits it passes to runc's nearest ancestor
    that is a child subreaper, here a small reaper process (`_REAPER`, our
    child, in a session of its own) that waits for it and exits with its status.
    """

    def __init__(self, state_dirs: tuple[Path, ...] = CONTAINERD_STATE_DIRS) -> None:
        self._state_dirs = state_dirs
        self._started: dict[str, _Started] = {}
        self._lock = threading.Lock()

    @staticmethod
    def usable() -> bool:
        """runc needs Linux and root (to enter the namespaces and read the state)."""
        return sys.platform == "linux" and os.geteuid() == 0

    @staticmethod
    def owns(exec_id: str) -> bool:
        return exec_id.startswith(RUNC_PREFIX)

    def find(self, container_id: str) -> RuncTarget | None:
        """The container's runc target, or None if this host has no runc state
        for it (not running, another engine, another runtime)."""
        if not container_id.isalnum():
            return None
        try:
            return self._find(container_id)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _find(self, container_id: str) -> RuncTarget | None:
        bundle = next(
            (
                d / BUNDLES / container_id
                for d in self._state_dirs
                if (d / BUNDLES / container_id / "config.json").is_file()
            ),
            None,
        )
        if bundle is None:
            return None
        if Path((bundle / "shim-binary-path").read_text().strip()).name != RUNC_SHIM:
            return None
        options_file = bundle / "options.json"
        options = json.loads(options_file.read_text()) if options_file.is_file() else {}
        root = f"{options.get('root') or RUNC_DEFAULT_ROOT}/moby"
        binary = shutil.which(options.get("binary_name") or "runc")
        state = json.loads((Path(root) / container_id / "state.json").read_text())
        init_pid = int(state["init_process_pid"])
        if binary is None or not Path(f"/proc/{init_pid}").is_dir():
            return None  # no runtime binary, or the engine is in another PID namespace
        process = json.loads((bundle / "config.json").read_text())["process"]
        return RuncTarget(container_id, binary, root, process, init_pid)

    def open(self, target: RuncTarget, command: list[str], env: dict[str, str]) -> ExecStream:
        spec = _exec_process(target.process, command, env)
        exec_id = RUNC_PREFIX + secrets.token_hex(12)
        ours, theirs = socket.socketpair()
        err_ours, err_theirs = socket.socketpair()
        for sock in (ours, theirs):
            _enlarge_send_buffer(sock)
        spec_fd = os.memfd_create("gpudock-exec-process", os.MFD_CLOEXEC)
        try:
            os.write(spec_fd, json.dumps(spec).encode())
            argv = [sys.executable, "-I", "-S", "-c", _REAPER, str(spec_fd), target.binary]
            argv += ["--root", target.root, "exec", "--detach", "--process"]
            argv += [f"/proc/self/fd/{spec_fd}", target.container_id]
            process = subprocess.Popen(
                argv,
                stdin=theirs.fileno(),
                stdout=theirs.fileno(),
                stderr=err_theirs.fileno(),
                pass_fds=(spec_fd,),
                env={"PATH": os.environ.get("PATH", os.defpath)},
                start_new_session=True,  # a Ctrl-C at the server is not the session's
            )
        except OSError as exc:
            ours.close()
            err_ours.close()
            raise RuntimeFailure(f"could not start runc in {target.container_id}: {exc}") from exc
        finally:
            os.close(spec_fd)
            theirs.close()
            err_theirs.close()
        ours.setblocking(False)
        err_ours.setblocking(False)
        with self._lock:
            self._forget_unclaimed()
            self._started[exec_id] = _Started(process)
        return ExecStream(
            exec_id=exec_id,
            sock=ours,
            initial=b"",
            decoder=RawOutput(),
            tty=False,
            err_sock=err_ours,
        )

    def exit_code(self, exec_id: str) -> int | None:
        """The process's exit status once it has ended (128 + N after signal N,
        as `docker exec` reports it; 255 if runc could not start it); None
        while it runs, or if unknown."""
        with self._lock:
            started = self._started.get(exec_id)
            if started is None:
                return None
            status = started.process.poll()
            if status is None:
                return None
            del self._started[exec_id]
        return 128 - status if status < 0 else status

    def _forget_unclaimed(self) -> None:
        """Reap ended reapers whose status nobody asked for in time (their
        client left). Called with the lock held."""
        now = time.monotonic()
        for exec_id, started in list(self._started.items()):
            if started.process.poll() is None:
                continue
            if started.ended_at is None:
                started.ended_at = now
            elif now - started.ended_at > UNCLAIMED_EXIT_KEPT_S:
                del self._started[exec_id]


def _enlarge_send_buffer(sock: socket.socket) -> None:
    """EXEC_SOCKET_BUFFER bytes in flight each way instead of the default ~200 KiB:
    fewer full-buffer turns of the event loop (upload CPU -30 %, docs/benchmarks.md).
    As root, above the host's `net.core.wmem_max` too."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, EXEC_SOCKET_BUFFER)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, EXEC_SOCKET_BUFFER)


# Run as `python -I -S -c _REAPER SPEC_FD RUNC ARGS...` with the session's sockets
# as stdio: becomes a child subreaper, runs `runc exec --detach` (which returns
# once the process runs), lets go of the sockets and of the spec, then waits
# for the process that runc's exit handed to it and exits with its status.
_REAPER = r"""
import ctypes, os, sys
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit(255)
runc = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
started = os.waitstatus_to_exitcode(os.waitpid(runc, 0)[1]) == 0
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2, int(sys.argv[1])):
    os.dup2(null, fd)
if not started:
    sys.exit(255)
try:
    code = os.waitstatus_to_exitcode(os.wait()[1])
except ChildProcessError:
    sys.exit(255)
sys.exit(128 - code if code < 0 else code)
"""


def _exec_process(
    container_process: dict[str, Any], command: list[str], env: dict[str, str]
) -> dict[str, Any]:
    """dockerd's exec process: the container's, with ARGS, ENV merged, no terminal."""
    process = copy.deepcopy(container_process)
    merged = list(process.get("env") or [])
    for key, value in env.items():
        entry = f"{key}={value}"
        index = next((i for i, e in enumerate(merged) if e.split("=", 1)[0] == key), None)
        if index is None:
            merged.append(entry)
        else:
            merged[index] = entry
    process.update(args=list(command), env=merged, terminal=False)
    process.pop("consoleSize", None)
    return process
