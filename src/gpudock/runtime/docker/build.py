"""Runs a build plan (`gpudock.runtime.build.plan`) on the Docker Engine.

Each step that makes a layer gets a container of its own, hardened exactly as
an instance's (all capabilities dropped but the allow-list, no-new-privileges,
pids, memory and CPU limits) and without any network. `RUN` executes inside it
as an exec (so build arguments reach the process but never the image's
configuration) and the container is committed with the configuration the plan
computed. Images are named only by id here: the service resolved and
authorised every name before the plan was made.

Layers are cached per user: each intermediate image carries a label with the
digest of (user, parent image, step, content), and a later build with the same
step reuses it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import posixpath
import tarfile
import tempfile
import threading
import time
from collections.abc import Generator, Iterable, Iterator, Mapping
from typing import IO, Any

import docker
import docker.errors
import requests.exceptions

from gpudock.errors import InvalidRequest
from gpudock.runtime.base import (
    LABEL_BUILD,
    LABEL_CLUSTER,
    LABEL_MANAGED,
    LABEL_OWNER,
    BuildJob,
    BuildLine,
)
from gpudock.runtime.build.context import Owner
from gpudock.runtime.build.plan import CopySpec, RunSpec, Stage, Step

LABEL_CACHE = "gpudock.build.cache"
# A commit takes the step container's labels along; a built image carries none
# of them (emptied: a commit cannot drop one), or every container made from it
# would look like one of this build's steps to garbage collection.
STEP_LABELS_EMPTIED = {LABEL_MANAGED: "", LABEL_CLUSTER: "", LABEL_BUILD: ""}
KEEPALIVE = ["sleep", "infinity"]
_DIRECTORY_BIT = 1 << 31  # Go's os.ModeDir, as the engine's path stat reports it
_SPOOL_BYTES = 32 * 2**20


class BuildFailed(Exception):
    """A step failed; the message is the last line the log shows."""


class DockerBuilder:
    def __init__(
        self, api: docker.APIClient, engine_cpus: int, capabilities: tuple[str, ...]
    ) -> None:
        self._api = api
        self._engine_cpus = engine_cpus
        self._capabilities = capabilities

    def run(self, job: BuildJob) -> Iterator[BuildLine]:
        """Log lines, then the image id, or an error line: engine failures end
        the stream with `BuildLine(error=…)`, never an exception."""
        deadline = time.monotonic() + job.limits.timeout_s
        try:
            final = yield from self._stages(job, deadline)
        except BuildFailed as exc:
            yield BuildLine(error=str(exc))
            return
        except InvalidRequest as exc:
            yield BuildLine(error=exc.message)
            return
        except docker.errors.APIError as exc:
            yield BuildLine(error=str(exc.explanation or exc))
            return
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            yield BuildLine(error=f"the Docker Engine is unreachable ({exc})")
            return
        finally:
            self._remove_leftovers(job)
        yield BuildLine(image_id=final)

    def _stages(self, job: BuildJob, deadline: float) -> Generator[BuildLine, None, str]:
        results: dict[int, str] = {}
        for stage in job.plan.stages:
            if stage.base_image is not None:
                image = stage.base_image
            else:
                assert stage.base_stage is not None
                image = results[stage.base_stage]
            results[stage.index] = yield from self._stage(job, stage, image, results, deadline)
        return self._finish(job, results[job.plan.stages[-1].index])

    def _stage(
        self,
        job: BuildJob,
        stage: Stage,
        image: str,
        results: Mapping[int, str],
        deadline: float,
    ) -> Generator[BuildLine, None, str]:
        committed = dict(stage.steps[0].config)
        for step in stage.steps:
            yield BuildLine(text=f"Step {step.number}/{job.plan.total_steps} : {step.text}")
            if step.notice:
                yield BuildLine(text=f" ---> {step.notice}")
            if step.run is None and step.copy is None:
                continue
            if time.monotonic() >= deadline:
                raise BuildFailed(_past_deadline(job))
            image = yield from self._layer(job, step, image, results, deadline)
            committed = dict(step.config)
        last = dict(stage.steps[-1].config)
        if last != committed:  # configuration-only steps at the end of the stage
            key = self._key(job, image, {"config": last})
            image = self._find_cached(key) or self._commit_fresh(job, image, last, key)
        return image

    def _layer(
        self,
        job: BuildJob,
        step: Step,
        image: str,
        results: Mapping[int, str],
        deadline: float,
    ) -> Generator[BuildLine, None, str]:
        if step.run is not None:
            key = self._key(job, image, {"run": step.run.__dict__, "config": step.config})
            made = self._find_cached(key)
            if made is None:
                made = yield from self._run(job, step.run, step.config, image, key, deadline)
                yield BuildLine(text=f" ---> {_short(made)}")
            else:
                yield BuildLine(text=" ---> Using cache")
            return made
        assert step.copy is not None
        made, cached = self._copy(job, step, step.copy, image, results)
        yield BuildLine(text=" ---> Using cache" if cached else f" ---> {_short(made)}")
        return made

    # -- RUN ---------------------------------------------------------------------------
    def _run(
        self,
        job: BuildJob,
        run: RunSpec,
        config: Mapping[str, Any],
        image: str,
        key: str,
        deadline: float,
    ) -> Generator[BuildLine, None, str]:
        container = self._container(job, image, run.workdir, run.user)
        self._api.start(container)
        killer = threading.Timer(max(0.0, deadline - time.monotonic()), self._kill, (container,))
        killer.daemon = True
        killer.start()
        try:
            execution = self._api.exec_create(
                container,
                list(run.argv),
                environment=list(run.env),
                workdir=run.workdir,
                user=run.user,
            )
            yield from _lines(self._api.exec_start(execution, stream=True))
            code = self._api.exec_inspect(execution).get("ExitCode")
        finally:
            killer.cancel()
        if time.monotonic() >= deadline:
            raise BuildFailed(_past_deadline(job))
        if code != 0:
            # The classic builder's wording, which users and scripts know.
            shown = " ".join(run.argv)
            raise BuildFailed(f"The command '{shown}' returned a non-zero code: {code}")
        return self._commit(container, config, key)

    # -- COPY / ADD --------------------------------------------------------------------
    def _copy(
        self,
        job: BuildJob,
        step: Step,
        spec: CopySpec,
        image: str,
        results: Mapping[int, str],
    ) -> tuple[str, bool]:
        container = self._container(job, image, "/", "")
        owner = self._owner(container, spec.chown)
        dest_is_dir = not spec.dest.endswith("/") and self._is_dir(container, spec.dest)
        source = spec.from_image or (
            results[spec.from_stage] if spec.from_stage is not None else None
        )
        described = {"copy": spec.__dict__, "config": step.config, "source": source}
        if source is None:
            archive = job.context.archive(
                spec.sources, spec.dest, owner, spec.chmod, spec.unpack, dest_is_dir
            )
        else:
            archive = self._archive_from_image(job, source, spec, owner, dest_is_dir)
        key = self._key(job, image, described, archive)
        cached = self._find_cached(key)
        if cached is not None:
            self._remove(container)
            return cached, True
        self._api.put_archive(container, "/", archive)
        return self._commit(container, step.config, key), False

    def _archive_from_image(
        self, job: BuildJob, image: str, spec: CopySpec, owner: Owner, dest_is_dir: bool
    ) -> IO[bytes]:
        """COPY --from: each source read out of `image`, re-rooted at the destination."""
        if any(ch in s for s in spec.sources for ch in "*?["):
            raise BuildFailed("COPY --from does not take wildcards here: name the paths")
        source = self._container(job, image, "/", "")
        several = len(spec.sources) > 1 or spec.dest.endswith("/") or dest_is_dir
        out = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115 - returned
        try:
            with tarfile.open(fileobj=out, mode="w:") as target:
                for path in spec.sources:
                    self._add_from(target, source, path, spec, owner, several)
        finally:
            self._remove(source)
        out.seek(0)
        return out

    def _add_from(
        self,
        target: tarfile.TarFile,
        container: str,
        path: str,
        spec: CopySpec,
        owner: Owner,
        several: bool,
    ) -> None:
        try:
            chunks, stat = self._api.get_archive(container, posixpath.join("/", path))
        except docker.errors.NotFound as exc:
            raise BuildFailed(f"COPY --from: {path} does not exist in that image") from exc
        is_dir = bool(int(stat.get("mode", 0)) & _DIRECTORY_BIT)
        top = posixpath.basename(posixpath.normpath(path)) or "."
        root = spec.dest.rstrip("/") or "/"
        with tarfile.open(fileobj=_Chunks(chunks), mode="r|") as source:
            for member in source:
                inner = member.name[len(top) :].lstrip("/") if member.name != top else ""
                if is_dir:
                    if not inner:
                        continue
                    name = posixpath.join(root, inner)
                else:
                    name = posixpath.join(root, top) if several else root
                member.name, member.uid, member.gid = name.lstrip("/"), owner.uid, owner.gid
                member.uname = member.gname = ""
                if spec.chmod is not None and not member.issym():
                    member.mode = spec.chmod
                data = source.extractfile(member) if member.isfile() else None
                target.addfile(member, data)

    def _owner(self, container: str, chown: str | None) -> Owner:
        if not chown:
            return Owner()
        user, _, group = chown.partition(":")
        uid = self._id_of(container, "/etc/passwd", user, "user")
        gid = self._id_of(container, "/etc/group", group, "group") if group else uid
        return Owner(uid, gid)

    def _id_of(self, container: str, table: str, name: str, what: str) -> int:
        if name.isdigit():
            return int(name)
        text = self._read_file(container, table)
        for line in text.splitlines():
            fields = line.split(":")
            if len(fields) > 2 and fields[0] == name and fields[2].isdigit():
                return int(fields[2])
        raise BuildFailed(f"--chown: the image has no {what} named {name!r}")

    def _read_file(self, container: str, path: str) -> str:
        try:
            chunks, _ = self._api.get_archive(container, path)
        except docker.errors.NotFound:
            return ""
        with tarfile.open(fileobj=_Chunks(chunks), mode="r|") as tar:
            for member in tar:
                handle = tar.extractfile(member)
                return handle.read().decode(errors="replace") if handle else ""
        return ""

    def _is_dir(self, container: str, path: str) -> bool:
        """The engine's path stat (HEAD /containers/{id}/archive): no content moves."""
        # docker-py reads this stat only together with the content; ask for the header alone.
        url = self._api._url("/containers/{0}/archive", container)
        answer = self._api.head(url, params={"path": path})
        if answer.status_code == 404:
            return False
        answer.raise_for_status()
        header = answer.headers.get("X-Docker-Container-Path-Stat", "")
        stat = json.loads(_b64(header)) if header else {}
        return bool(int(stat.get("mode", 0)) & _DIRECTORY_BIT)

    # -- engine helpers ----------------------------------------------------------------
    def _container(self, job: BuildJob, image: str, workdir: str, user: str) -> str:
        limits = job.limits
        host_config = self._api.create_host_config(
            init=True,
            network_mode="none",
            privileged=False,
            cap_drop=["ALL"],
            cap_add=list(self._capabilities),
            security_opt=["no-new-privileges:true"],
            pids_limit=limits.pids,
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=int(min(limits.cpus, self._engine_cpus) * 1e9),
        )
        created = self._api.create_container(
            image,
            command=KEEPALIVE,
            entrypoint=[],
            working_dir=workdir or None,
            user=user or None,
            labels={
                LABEL_MANAGED: "true",
                LABEL_CLUSTER: job.cluster_id,
                LABEL_BUILD: job.id,
                LABEL_OWNER: job.owner,
            },
            host_config=host_config,
            network_disabled=True,
        )
        return str(created["Id"])

    def _commit(self, container: str, config: Mapping[str, Any], key: str) -> str:
        image = self._api.commit(container, conf=_commit_conf(config, {LABEL_CACHE: key}))
        self._remove(container)
        return str(image["Id"])

    def _commit_fresh(self, job: BuildJob, image: str, config: Mapping[str, Any], key: str) -> str:
        return self._commit(self._container(job, image, "/", ""), config, key)

    def _finish(self, job: BuildJob, image: str) -> str:
        """The result: the last stage with the build's labels, under its tag."""
        info = self._api.inspect_image(image)
        config = {k: v for k, v in (info.get("Config") or {}).items() if v}
        labels = {
            **(config.get("Labels") or {}),
            **STEP_LABELS_EMPTIED,
            **job.labels,
            LABEL_CACHE: "",
        }
        final = self._commit(self._container(job, image, "/", ""), {**config, "Labels": labels}, "")
        repository, _, tag = job.tag.rpartition(":")
        self._api.tag(final, repository, tag)
        return final

    def _kill(self, container: str) -> None:
        with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
            self._api.kill(container)

    def _remove(self, container: str) -> None:
        with contextlib.suppress(docker.errors.APIError):
            self._api.remove_container(container, force=True)

    def _remove_leftovers(self, job: BuildJob) -> None:
        with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
            found = self._api.containers(all=True, filters={"label": f"{LABEL_BUILD}={job.id}"})
            for container in found:
                self._remove(container["Id"])

    def _find_cached(self, key: str) -> str | None:
        found = self._api.images(all=True, filters={"label": f"{LABEL_CACHE}={key}"})
        return str(found[0]["Id"]) if found else None

    def _key(
        self, job: BuildJob, image: str, step: Mapping[str, Any], archive: IO[bytes] | None = None
    ) -> str:
        digest = hashlib.sha256()
        digest.update(json.dumps([job.owner, image, step], sort_keys=True, default=str).encode())
        if archive is not None:
            for chunk in iter(lambda: archive.read(2**20), b""):
                digest.update(chunk)
            archive.seek(0)
        return digest.hexdigest()


def _commit_conf(config: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    conf = {key: value for key, value in config.items() if value is not None}
    conf["Labels"] = {**(config.get("Labels") or {}), **labels}
    return conf


def _lines(chunks: Iterable[bytes]) -> Iterator[BuildLine]:
    pending = b""
    for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield BuildLine(text=line.rstrip(b"\r").decode(errors="replace"))
    if pending:
        yield BuildLine(text=pending.rstrip(b"\r").decode(errors="replace"))


def _short(image_id: str) -> str:
    return image_id.removeprefix("sha256:")[:12]


def _past_deadline(job: BuildJob) -> str:
    return f"the build ran past its time limit ({job.limits.timeout_s:.0f} s) and was stopped"


def _b64(text: str) -> str:
    return base64.b64decode(text).decode()


class _Chunks(io.RawIOBase):
    """A readable file over an iterator of byte chunks (the engine's archive stream)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size], self._pending = self._pending[:size], self._pending[size:]
        return size
