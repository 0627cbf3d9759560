from __future__ import annotations

from collections.abc import Callable

from tests.support.server_process import ServerProcess

ServerFactory = Callable[..., ServerProcess]
