"""Images on the engine: looked up, pulled, removed, and imported from a root
file system (the base image, `gpudock.images.base_image`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator

import docker
import docker.errors
import docker.utils

from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.runtime.base import ImageInfo, ImageNotFound, RegistryUnreachable
from gpudock.runtime.docker.translate import (
    explain,
    image_info_of,
    registry_unreachable,
    translated,
)
from gpudock.runtime.transfer import common_bottom

SAVE_CHUNK = 1 << 20


class DockerImages:
    """The images of one engine, remembering those it has seen present."""

    def __init__(self, api: docker.APIClient) -> None:
        self._api = api
        self._seen: set[str] = set()

    def save(self, ref: str) -> Iterator[bytes]:
        with translated(f"save image {ref}"):
            chunks = self._api.get_image(ref, chunk_size=SAVE_CHUNK)
        while True:
            with translated(f"save image {ref}"):
                chunk = next(chunks, None)
            if chunk is None:
                return
            yield chunk

    def load(self, chunks: Iterator[bytes]) -> None:
        with translated("load an image"):
            answer = self._api.load_image(chunks)
            for line in answer or []:
                if isinstance(line, dict) and line.get("error"):
                    raise RuntimeFailure(f"could not load an image: {line['error']}")

    def present(self, ref: str) -> bool:
        try:
            with translated(f"inspect image {ref}"):
                self._api.inspect_image(ref)
        except ImageNotFound:
            return False
        return True

    def pullable(self, ref: str) -> bool:
        try:
            with translated(f"look up {ref} in its registry"):
                self._api.inspect_distribution(ref)
        except RuntimeUnavailable:
            raise
        except RuntimeFailure as exc:
            if registry_unreachable(exc.message):
                raise RegistryUnreachable(_unreachable(ref, exc.message)) from exc
            return False
        return True

    def ensure(self, ref: str) -> None:
        # Seen present before: skip the round trip (`forget` undoes it when a
        # container create finds the image gone).
        if ref in self._seen or self.present(ref):
            self._seen.add(ref)
            return
        repository, tag = docker.utils.parse_repository_tag(ref)
        with translated(f"pull image {ref}"):
            try:
                for event in self._api.pull(
                    repository, tag=tag or "latest", stream=True, decode=True
                ):
                    if "error" in event:
                        raise _pull_failure(ref, str(event["error"]))
                self._api.inspect_image(ref)
            except docker.errors.APIError as exc:
                raise _pull_failure(ref, explain(exc)) from exc

    def forget(self, ref: str) -> None:
        """The engine said it lacks `ref`: ask it again next time."""
        self._seen.discard(ref)

    def info(self, ref: str) -> ImageInfo | None:
        try:
            with translated(f"inspect image {ref}"):
                attrs = self._api.inspect_image(ref)
        except ImageNotFound:
            return None
        except RuntimeUnavailable:
            raise
        except RuntimeFailure:
            return None  # the engine refused the name itself: it has no such image
        return image_info_of(attrs)

    def held_bottom(self, layers: tuple[str, ...]) -> list[str]:
        best: list[str] = []
        with translated("list images"):
            summaries = self._api.images()
        for summary in summaries:
            if len(best) == len(layers):
                break
            found = self.info(str(summary["Id"]))
            if found is not None:
                shared = common_bottom(layers, found.layers)
                best = shared if len(shared) > len(best) else best
        return best

    def size(self, ref: str) -> int | None:
        found = self.info(ref)
        return None if found is None else found.size_bytes

    def remove(self, ref: str) -> None:
        self.forget(ref)
        with contextlib.suppress(ImageNotFound), translated(f"remove image {ref}"):
            self._api.remove_image(ref, force=True)

    def remove_if_unused(self, ref: str) -> None:
        """Remove the image unless a container uses it (`RuntimeFailure` then)."""
        self.forget(ref)
        with translated(f"remove image {ref}"):
            self._api.remove_image(ref)

    def import_rootfs(self, tar_chunks: Iterable[bytes], tag: str, changes: list[str]) -> str:
        """Import an uncompressed tar of a root file system, streamed as it is
        read, as the single-layer image `tag` with Dockerfile `changes`; return
        its id. The upload has no time limit: it lasts as long as the tar."""
        repository, version = docker.utils.parse_repository_tag(tag)
        with translated(f"import {tag}"):
            answer = self._api.import_image_from_data(
                tar_chunks, repository=repository, tag=version or "latest", changes=changes
            )
        return _imported_id(answer)


def _not_pulled(ref: str, why: str) -> str:
    return f"image {ref!r} is not on the engine and could not be pulled: {why}"


def _unreachable(ref: str, why: str) -> str:
    return (
        f"image {ref!r} is not on the engine and its registry cannot be reached from it "
        f"({why}); the name may well be right: try again later, or use an image that is "
        "on the host"
    )


def _pull_failure(ref: str, why: str) -> RuntimeFailure:
    if registry_unreachable(why):
        return RegistryUnreachable(_unreachable(ref, why))
    return ImageNotFound(_not_pulled(ref, why))


def _imported_id(answer: str | bytes) -> str:
    """The image id from the engine's import answer (JSON lines), or its error."""
    text = answer.decode("utf-8", "replace") if isinstance(answer, bytes) else str(answer)
    image_id = ""
    for line in text.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict):
            continue
        if message.get("error"):
            raise RuntimeFailure(f"the Docker Engine refused the import: {message['error']}")
        status = str(message.get("status", ""))
        if status.startswith("sha256:"):
            image_id = status
    if not image_id:
        raise RuntimeFailure(f"the Docker Engine answered the import unexpectedly: {text[:200]}")
    return image_id
