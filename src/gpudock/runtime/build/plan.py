"""A Dockerfile turned into a build plan gpudock runs itself, step by step.

Why not hand the Dockerfile to the engine's builder: the classic builder
resolves every image name on its own (so an alias or `COPY --from` reaches
another tenant's private image), fetches `ADD <url>` from the host's network,
and runs `RUN` with the engine's default capabilities and no pids limit —
`securityopt` is refused on Linux builds. So gpudock parses the file with
BuildKit's own parser (the `dockerfile` package), resolves and authorises every
image the file names through a callback before anything runs, and gives the
runtime a plan in which every image is an id. `RUN` then executes in a
container hardened like an instance.

Supported: FROM (with stages, `AS`, global ARGs), RUN (shell, exec, one
heredoc), COPY and ADD from the context or `--from` (with `--chown`,
`--chmod`; ADD unpacks local tar archives), ENV, ARG, LABEL, WORKDIR, USER,
CMD, ENTRYPOINT, EXPOSE, SHELL, STOPSIGNAL, HEALTHCHECK, ONBUILD (recorded),
MAINTAINER. Refused with a reason: remote ADD, RUN `--mount`/`--network`/
`--security`, VOLUME, FROM scratch and `--platform`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

import dockerfile

from gpudock.runtime.build.words import WordError, word, words

CONFIG_KEYS = (
    "Env",
    "Cmd",
    "Entrypoint",
    "WorkingDir",
    "User",
    "Labels",
    "ExposedPorts",
    "Shell",
    "StopSignal",
    "Healthcheck",
    "OnBuild",
)
DEFAULT_SHELL = ["/bin/sh", "-c"]
_REMOTE = ("http://", "https://", "git@", "git://", "ssh://")


class DockerfileError(ValueError):
    """The Dockerfile cannot be built here; the message names the line and why."""


@dataclass(frozen=True)
class BaseImage:
    """What the resolver says about an image the file names."""

    image_id: str
    config: Mapping[str, Any]


@dataclass(frozen=True)
class RunSpec:
    argv: tuple[str, ...]
    env: tuple[str, ...]  # the image's ENV plus the ARGs in scope, "K=V"
    workdir: str
    user: str


@dataclass(frozen=True)
class CopySpec:
    sources: tuple[str, ...]
    dest: str  # absolute; a trailing "/" means "into this directory"
    from_stage: int | None = None
    from_image: str | None = None  # an image id
    chown: str | None = None
    chmod: int | None = None
    unpack: bool = False  # ADD: local tar archives are unpacked


@dataclass(frozen=True)
class Step:
    number: int
    text: str  # as written, for the log
    config: Mapping[str, Any]  # the image configuration after this step
    run: RunSpec | None = None
    copy: CopySpec | None = None
    notice: str | None = None  # said in the log; changes nothing


@dataclass(frozen=True)
class Stage:
    index: int
    name: str | None
    base_image: str | None  # an image id, or None when it starts from `base_stage`
    base_stage: int | None
    steps: tuple[Step, ...]  # steps[0] is the FROM


@dataclass(frozen=True)
class Plan:
    stages: tuple[Stage, ...]
    total_steps: int


Resolver = Callable[[str, int], BaseImage]  # (reference as written, line) → image


@dataclass
class _StageState:
    index: int
    name: str | None
    config: dict[str, Any]
    args: dict[str, str]
    base_image: str | None = None
    base_stage: int | None = None
    steps: list[Step] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        pairs = (item.partition("=") for item in self.config.get("Env") or [])
        return {key: value for key, _, value in pairs}

    def scope(self) -> dict[str, str]:
        """What `$NAME` sees: ARGs, overridden by ENV (Docker's order)."""
        return {**self.args, **self.env()}


def plan(text: str, resolve: Resolver, build_args: Mapping[str, str] | None = None) -> Plan:
    """Parse, expand and authorise (through `resolve`) the whole file."""
    try:
        commands = dockerfile.parse_string(text)
    except dockerfile.GoParseError as exc:
        raise DockerfileError(f"the Dockerfile does not parse: {exc}") from exc
    escape = _escape_directive(text)
    planner = _Planner(resolve, dict(build_args or {}), escape, len(commands))
    for number, command in enumerate(commands, start=1):
        planner.add(number, command)
    return planner.finish()


def _escape_directive(text: str) -> str:
    for line in text.splitlines():
        stripped = line.strip().lower().replace(" ", "")
        if not stripped.startswith("#"):
            break
        if stripped.startswith("#escape="):
            return stripped.removeprefix("#escape=")[:1] or "\\"
    return "\\"


class _Planner:
    def __init__(self, resolve: Resolver, build_args: dict[str, str], escape: str, total: int):
        self.resolve, self.build_args, self.escape, self.total = resolve, build_args, escape, total
        self.global_args: dict[str, str] = {}
        self.stages: list[_StageState] = []

    # -- entry points ------------------------------------------------------------------
    def add(self, number: int, command: dockerfile.Command) -> None:
        name = command.cmd.upper()
        if name == "FROM":
            self._from(number, command)
            return
        if name == "ARG" and not self.stages:
            self._arg(command, self.global_args, self.global_args)
            return
        if not self.stages:
            raise self._error(command, "the first instruction must be FROM (or ARG)")
        handler = _HANDLERS.get(name)
        if handler is None:
            raise self._error(command, f"unknown instruction {command.cmd}")
        handler(self, number, command)

    def finish(self) -> Plan:
        if not self.stages:
            raise DockerfileError("the Dockerfile has no FROM line")
        stages = tuple(
            Stage(s.index, s.name, s.base_image, s.base_stage, tuple(s.steps)) for s in self.stages
        )
        return Plan(stages, self.total)

    # -- helpers -----------------------------------------------------------------------
    @property
    def stage(self) -> _StageState:
        return self.stages[-1]

    def _error(self, command: dockerfile.Command, why: str) -> DockerfileError:
        return DockerfileError(
            f"line {command.start_line}: {command.original.strip()[:120]}: {why}"
        )

    def _word(self, command: dockerfile.Command, text: str, strict: bool = False) -> str:
        try:
            return word(text, self.stage.scope(), escape=self.escape, strict=strict)
        except WordError as exc:
            raise self._error(command, str(exc)) from exc

    def _words(self, command: dockerfile.Command, text: str) -> list[str]:
        try:
            return words(text, self.stage.scope(), escape=self.escape)
        except WordError as exc:
            raise self._error(command, str(exc)) from exc

    def _step(self, number: int, command: dockerfile.Command, **kwargs: Any) -> None:
        config = deepcopy(self.stage.config)
        self.stage.steps.append(Step(number, _shown(command), config, **kwargs))

    def _flags(self, command: dockerfile.Command, allowed: set[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for flag in command.flags:
            key, _, value = flag.removeprefix("--").partition("=")
            if key not in allowed:
                raise self._error(command, _REFUSED_FLAGS.get(key, f"--{key} is not supported"))
            found[key] = value
        return found

    # -- instructions ------------------------------------------------------------------
    def _from(self, number: int, command: dockerfile.Command) -> None:
        if command.flags:
            raise self._error(command, "--platform is not supported: images build for the host")
        values = list(command.value)
        alias = None
        if len(values) == 3 and values[1].upper() == "AS":
            alias = values[2].lower()
        elif len(values) != 1:
            raise self._error(command, "expected FROM <image> [AS <name>]")
        try:
            ref = word(values[0], self.global_args, escape=self.escape, strict=True)
        except WordError as exc:
            raise self._error(command, f"the image name cannot be resolved: {exc}") from exc
        state = _StageState(len(self.stages), alias, {}, {})
        parent = self._stage_named(ref)
        if parent is not None:
            state.base_stage, state.config = parent.index, deepcopy(parent.config)
        elif ref.lower() == "scratch":
            raise self._error(command, "FROM scratch is not supported: start from an image")
        else:
            base = self.resolve(ref, command.start_line)
            state.base_image, state.config = base.image_id, _config_of(base.config)
        self.stages.append(state)
        self._step(number, command)

    def _stage_named(self, ref: str) -> _StageState | None:
        return next((s for s in self.stages if s.name is not None and s.name == ref.lower()), None)

    def _arg(
        self, command: dockerfile.Command, into: dict[str, str], scope: dict[str, str]
    ) -> None:
        for item in command.value:
            key, has_default, default = item.partition("=")
            if key in self.build_args:
                into[key] = self.build_args[key]
            elif has_default:
                into[key] = word(default, scope, escape=self.escape)
            elif key in self.global_args:
                into[key] = self.global_args[key]

    def arg(self, number: int, command: dockerfile.Command) -> None:
        self._arg(command, self.stage.args, self.stage.scope())
        self._step(number, command)

    def run(self, number: int, command: dockerfile.Command) -> None:
        self._flags(command, set())
        if command.heredocs:
            if len(command.heredocs) != 1 or not command.value[0].startswith("<<"):
                raise self._error(command, "only RUN <<EOF … EOF (one script) is supported")
            argv = [*self._shell(), command.heredocs[0].content]
        elif command.json:
            argv = list(command.value)
        else:
            argv = [*self._shell(), " ".join(command.value)]
        config = self.stage.config
        args = [f"{k}={v}" for k, v in self.stage.args.items() if k not in self.stage.env()]
        spec = RunSpec(
            argv=tuple(argv),
            env=tuple([*(config.get("Env") or []), *args]),
            workdir=config.get("WorkingDir") or "/",
            user=config.get("User") or "",
        )
        self._step(number, command, run=spec)

    def _shell(self) -> list[str]:
        return list(self.stage.config.get("Shell") or DEFAULT_SHELL)

    def copy(self, number: int, command: dockerfile.Command, add: bool = False) -> None:
        allowed = {"chown", "chmod", "link"} | (set() if add else {"from"})
        flags = self._flags(command, allowed)
        if command.heredocs:
            raise self._error(command, "COPY/ADD from a heredoc is not supported")
        items = list(command.value) if command.json else self._words(command, _arguments(command))
        items = [self._word(command, i) for i in items] if command.json else items
        if len(items) < 2:
            raise self._error(command, "expected one or more sources and a destination")
        *sources, dest = items
        if add and any(s.startswith(_REMOTE) for s in sources):
            raise self._error(
                command,
                "remote ADD is refused: builds have no network; put the file in the build "
                "context (or download it in a RUN on an instance) and COPY it",
            )
        spec = CopySpec(
            sources=tuple(sources),
            dest=self._destination(dest),
            chown=self._word(command, flags["chown"]) if flags.get("chown") else None,
            chmod=self._chmod(command, flags.get("chmod")),
            unpack=add,
            **self._copy_origin(command, flags.get("from")),
        )
        self._step(number, command, copy=spec)

    def _copy_origin(self, command: dockerfile.Command, origin: str | None) -> dict[str, Any]:
        if not origin:
            return {}
        ref = self._word(command, origin, strict=True)
        if ref.isdigit():
            index = int(ref)
            if index >= self.stage.index:
                raise self._error(command, f"--from={ref}: no earlier stage has that number")
            return {"from_stage": index}
        named = self._stage_named(ref)
        if named is not None and named.index < self.stage.index:
            return {"from_stage": named.index}
        return {"from_image": self.resolve(ref, command.start_line).image_id}

    def _chmod(self, command: dockerfile.Command, value: str | None) -> int | None:
        if value is None:
            return None
        try:
            return int(value, 8)
        except ValueError as exc:
            raise self._error(command, f"--chmod={value}: expected octal, e.g. 755") from exc

    def _destination(self, dest: str) -> str:
        base = self.stage.config.get("WorkingDir") or "/"
        joined = posixpath.join(base, dest)
        normal = posixpath.normpath(joined)
        return normal + "/" if dest.endswith("/") and normal != "/" else normal

    def add_(self, number: int, command: dockerfile.Command) -> None:
        self.copy(number, command, add=True)

    def env(self, number: int, command: dockerfile.Command) -> None:
        pairs = self._pairs(command)
        env = self.stage.env()
        env.update(pairs)
        self.stage.config["Env"] = [f"{k}={v}" for k, v in env.items()]
        self._step(number, command)

    def _pairs(self, command: dockerfile.Command) -> dict[str, str]:
        values = list(command.value)
        if len(values) % 2:
            raise self._error(command, "expected KEY=VALUE pairs")
        return {
            self._word(command, values[i]): self._word(command, values[i + 1])
            for i in range(0, len(values), 2)
        }

    def label(self, number: int, command: dockerfile.Command) -> None:
        labels = dict(self.stage.config.get("Labels") or {})
        labels.update(self._pairs(command))
        self.stage.config["Labels"] = labels
        self._step(number, command)

    def workdir(self, number: int, command: dockerfile.Command) -> None:
        path = self._word(command, " ".join(command.value))
        self.stage.config["WorkingDir"] = self._destination(path).rstrip("/") or "/"
        self._step(number, command)

    def user(self, number: int, command: dockerfile.Command) -> None:
        self.stage.config["User"] = self._word(command, " ".join(command.value))
        self._step(number, command)

    def cmd(self, number: int, command: dockerfile.Command, key: str = "Cmd") -> None:
        value = list(command.value) if command.json else [*self._shell(), " ".join(command.value)]
        self.stage.config[key] = value
        if key == "Entrypoint":
            self.stage.config["Cmd"] = None  # as Docker: ENTRYPOINT resets an inherited CMD
        self._step(number, command)

    def entrypoint(self, number: int, command: dockerfile.Command) -> None:
        self.cmd(number, command, key="Entrypoint")

    def shell(self, number: int, command: dockerfile.Command) -> None:
        if not command.json:
            raise self._error(command, 'SHELL needs the JSON form, e.g. SHELL ["/bin/bash", "-c"]')
        self.stage.config["Shell"] = list(command.value)
        self._step(number, command)

    def expose(self, number: int, command: dockerfile.Command) -> None:
        ports = dict(self.stage.config.get("ExposedPorts") or {})
        for port in self._words(command, " ".join(command.value)):
            ports[port if "/" in port else f"{port}/tcp"] = {}
        self.stage.config["ExposedPorts"] = ports
        self._step(number, command)

    def stopsignal(self, number: int, command: dockerfile.Command) -> None:
        self.stage.config["StopSignal"] = self._word(command, " ".join(command.value))
        self._step(number, command)

    def onbuild(self, number: int, command: dockerfile.Command) -> None:
        triggers = list(self.stage.config.get("OnBuild") or [])
        triggers.append(f"{command.sub_cmd} {' '.join(command.value)}")
        self.stage.config["OnBuild"] = triggers
        self._step(number, command, notice="recorded; gpudock never runs ONBUILD triggers")

    def ignored(self, number: int, command: dockerfile.Command) -> None:
        why = f"{command.cmd.upper()} has no effect on gpudock instances; ignored"
        self._step(number, command, notice=why)

    def volume(self, number: int, command: dockerfile.Command) -> None:
        raise self._error(
            command,
            "VOLUME is not supported: it would give each instance an unmanaged, unlimited "
            "volume; keep data in /root/data, the instance's data volume",
        )


_REFUSED_FLAGS = {
    "mount": "RUN --mount is not supported: builds see only their own file system",
    "network": "RUN --network is not supported: builds have no network",
    "security": "RUN --security is not supported: build steps run unprivileged",
    "from": "ADD --from is not supported: use COPY --from",
    "checksum": "ADD --checksum is not supported: remote ADD is refused",
    "keep-git-dir": "ADD --keep-git-dir is not supported: remote ADD is refused",
    "parents": "--parents is not supported",
    "exclude": "--exclude is not supported: use .dockerignore",
}
_HANDLERS: dict[str, Callable[[_Planner, int, dockerfile.Command], None]] = {
    "ARG": _Planner.arg,
    "RUN": _Planner.run,
    "COPY": _Planner.copy,
    "ADD": _Planner.add_,
    "ENV": _Planner.env,
    "LABEL": _Planner.label,
    "WORKDIR": _Planner.workdir,
    "USER": _Planner.user,
    "CMD": _Planner.cmd,
    "ENTRYPOINT": _Planner.entrypoint,
    "SHELL": _Planner.shell,
    "EXPOSE": _Planner.expose,
    "STOPSIGNAL": _Planner.stopsignal,
    "ONBUILD": _Planner.onbuild,
    "HEALTHCHECK": _Planner.ignored,
    "MAINTAINER": _Planner.ignored,
    "VOLUME": _Planner.volume,
}


def _arguments(command: dockerfile.Command) -> str:
    """The instruction's text after its keyword and flags, for word splitting."""
    rest = command.original.strip().split(None, 1)[1] if " " in command.original.strip() else ""
    for flag in command.flags:
        rest = rest.lstrip().removeprefix(flag)
    return rest.replace("\\\n", " ").strip()


def _shown(command: dockerfile.Command) -> str:
    return " ".join(command.original.strip().splitlines()[0].split())


def _config_of(config: Mapping[str, Any]) -> dict[str, Any]:
    return {key: deepcopy(config.get(key)) for key in CONFIG_KEYS if config.get(key)}


def external_images(built: Plan) -> set[str]:
    """Every image id the plan reads (bases and `COPY --from`)."""
    found = {s.base_image for s in built.stages if s.base_image}
    for stage in built.stages:
        found |= {st.copy.from_image for st in stage.steps if st.copy and st.copy.from_image}
    return found
