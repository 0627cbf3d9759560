"""Job commands: a shell command line an instance runs as its container's main
process (`/bin/sh -c COMMAND`) instead of gpudock's keep-alive. When it exits
the container exits, and the liveness pass stops the instance (the exit-stop
rule of `auto_stop`, on by default for a job) with the exit code in its reason.

The command is the container's command, so an image with an entry point gets
it as that entry point's arguments, as it gets the keep-alive: the services
image (`gpudock/jupyter:bookworm`) starts JupyterLab and TensorBoard, then
`exec`s it; their URLs work while the job runs and end with it."""

from __future__ import annotations

from gpudock.errors import InvalidRequest

MAX_COMMAND_CHARS = 4096


def check_command(command: str | None) -> str | None:
    """The command as stored, or None for an instance that runs until stopped."""
    if command is None:
        return None
    if not command.strip():
        raise InvalidRequest(
            "the command is empty: give a shell command line (e.g. 'python train.py'), "
            "or leave it out for an instance that runs until stopped",
            field="command",
        )
    if len(command) > MAX_COMMAND_CHARS:
        raise InvalidRequest(
            f"the command is {len(command)} characters long; at most {MAX_COMMAND_CHARS} "
            "are taken: put a longer job in a script on /root/data and run that",
            field="command",
        )
    if "\x00" in command:
        raise InvalidRequest(
            "the command contains a NUL character, which no shell command line can hold",
            field="command",
        )
    return command


def exit_stop_default(on_exit: bool | None, command: str | None) -> bool:
    """Stop on exit as asked; when not asked, a job (an instance with a command)
    stops when its command ends, and any other instance restarts."""
    return on_exit if on_exit is not None else command is not None
