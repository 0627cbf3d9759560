"""Service URLs into pods: `port_socket` over pod port-forward (WebSocket).

The `Runtime` contract hands the caller an unconnected TCP socket and an
address; here the address is a one-shot listener on 127.0.0.1 whose single
connection is relayed to the pod's port through a port-forward the official
client opens (`kubernetes.stream.portforward`). A listener nobody connects
to within `ACCEPT_TIMEOUT_S` closes."""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from typing import Any

from kubernetes.stream import portforward

from gpudock.runtime.base import PortSocket
from gpudock.runtime.kubernetes.api import KubeApi

ACCEPT_TIMEOUT_S = 30.0
log = logging.getLogger(__name__)
CHUNK = 65536


def _relay(one: Any, other: Any) -> None:
    """Copy both ways until both sides have ended."""
    ends = {one: other, other: one}
    open_reads = {one, other}
    while open_reads:
        readable, _, _ = select.select(list(open_reads), [], [])
        for sock in readable:
            data = sock.recv(CHUNK)
            if data:
                ends[sock].sendall(data)
                continue
            open_reads.discard(sock)
            with contextlib.suppress(OSError):  # the other side is gone already
                ends[sock].shutdown(socket.SHUT_WR)


class PodPorts:
    def __init__(self, api: KubeApi) -> None:
        self._api = api

    def socket_for(self, namespace: str, pod: str, port: int) -> PortSocket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(ACCEPT_TIMEOUT_S)
        threading.Thread(
            target=self._serve_one,
            args=(listener, namespace, pod, port),
            name=f"gpudock-portforward-{pod}-{port}",
            daemon=True,
        ).start()
        address = listener.getsockname()
        return PortSocket(socket.socket(socket.AF_INET, socket.SOCK_STREAM), address)

    def _serve_one(self, listener: socket.socket, namespace: str, pod: str, port: int) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return  # nobody came
        finally:
            listener.close()
        forward = None
        try:
            forward = portforward(
                self._api.core.connect_get_namespaced_pod_portforward,
                pod,
                namespace,
                ports=str(port),
            )
            _relay(conn, forward.socket(port))
        except Exception as exc:  # a vendor error ends here: the caller sees its connection close
            log.warning("port-forward to %s/%s:%d failed: %s", namespace, pod, port, exc)
        finally:
            conn.close()
            if forward is not None:
                forward.close()
