"""The one error class every command raises, and the exit codes.

Apart from the HTTP client (`cli/client.py`, which re-exports them) so that
`gpudock server`, which talks to no server, starts without httpx.
"""

from __future__ import annotations

EXIT_ERROR = 1  # the server or the runtime said no, or cannot be reached
EXIT_USAGE = 2  # the command line or the local configuration is wrong


class CliError(Exception):
    """Printed in red on stderr (with its hint), then the CLI exits `exit_code`."""

    def __init__(self, message: str, *, exit_code: int = EXIT_ERROR, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.hint = hint
