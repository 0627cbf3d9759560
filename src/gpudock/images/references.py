"""Image references as the engine reads them, and the names gpudock keeps to itself.

To the engine `ubuntu`, `library/ubuntu:latest` and `docker.io/library/ubuntu:latest`
are one image, and so is its image id. Every reference a tenant writes is parsed
here with the distribution grammar (`docker-image-py`, a port of
`distribution/reference`), so two spellings of one image compare equal and an
access rule cannot be stepped around by an alias.

Reserved names: `gpudock/<namespace>/<repository>` holds tenants' private images
(the namespace is derived from the user id, so two users can never share one) and
`gpudock-sys/…` the system disks gpudock commits for moving instances. Neither is
ever pulled from a registry; only the images table says who may use them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from docker_image import reference as distribution

DEFAULT_DOMAIN = "docker.io"
MAX_NAME_LENGTH = 255  # distribution's limit on the repository name
MAX_TAG_LENGTH = 128
_IMAGE_ID = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")
_PRIVATE = re.compile(r"^docker\.io/gpudock/[^/]+/.+$")
_SYSTEM = re.compile(r"^docker\.io/gpudock-sys/.+$")
_EXAMPLE = "e.g. 'pytorch/pytorch:2.4.1-cuda12.4-cudnn9-runtime' or 'gpudock/base:bookworm'"


class BadReference(ValueError):
    """The text is not an image reference; the message says why."""


@dataclass(frozen=True)
class ImageRef:
    """One parsed reference. `canonical` is what equality means; `familiar` is
    what people write and what gpudock stores and shows."""

    canonical: str  # docker.io/library/ubuntu:latest, or sha256:<id>
    familiar: str  # ubuntu:latest
    repository: str  # docker.io/library/ubuntu; "" for an image id
    tag: str | None = None
    digest: str | None = None

    @property
    def is_id(self) -> bool:
        return not self.repository

    @property
    def reserved(self) -> bool:
        """In a namespace only the images table may hand out (never pulled)."""
        return bool(_PRIVATE.match(self.repository) or _SYSTEM.match(self.repository))


def parse(text: str) -> ImageRef:
    """Parse and normalise: registry default, `library/`, `:latest`, image ids."""
    value = text.strip()
    found = _IMAGE_ID.match(value)
    if found:
        image_id = f"sha256:{found[1]}"
        return ImageRef(canonical=image_id, familiar=image_id, repository="")
    if not value:
        raise BadReference(f"empty image reference; {_EXAMPLE}")
    try:
        parsed = distribution.Reference.parse_normalized_named(value)
    except distribution.NameTooLong as exc:
        raise BadReference(
            f"image reference too long: the repository name may have at most "
            f"{MAX_NAME_LENGTH} characters ({len(value)} given)"
        ) from exc
    except distribution.InvalidReference as exc:
        raise BadReference(f"bad image reference {value[:80]!r}: {exc}; {_EXAMPLE}") from exc
    return _normalised(parsed)


def _normalised(parsed: distribution.Reference) -> ImageRef:
    name, tag, digest = parsed["name"], parsed["tag"], parsed["digest"]
    if tag is not None and len(tag) > MAX_TAG_LENGTH:
        raise BadReference(f"image tag too long: at most {MAX_TAG_LENGTH} characters")
    if tag is None and digest is None:
        tag = "latest"
    suffix = (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    return ImageRef(
        canonical=name + suffix,
        familiar=familiar_name(name) + suffix,
        repository=name,
        tag=tag,
        digest=digest,
    )


def familiar_name(repository: str) -> str:
    """`docker.io/library/ubuntu` → `ubuntu`, `docker.io/gpudock/x` → `gpudock/x`."""
    name = repository.removeprefix(f"{DEFAULT_DOMAIN}/")
    if name != repository and name.startswith("library/") and name.count("/") == 1:
        return name.removeprefix("library/")
    return name


def same_image_name(a: str, b: str) -> bool:
    """True if two references name the same tag or digest (not by content)."""
    try:
        return parse(a).canonical == parse(b).canonical
    except BadReference:
        return a == b


_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")


def namespace(user_name: str, user_id: str) -> str:
    """A user's namespace under `gpudock/`: the name itself where it is a valid
    path component (user names are unique, so this is injective), otherwise
    `0-<user id>`, which no user name can be (names start with a letter)."""
    return user_name if _COMPONENT.match(user_name) else f"0-{user_id}"


def private_repository(user_name: str, user_id: str, repository: str) -> str:
    """Where a user's builds and saved images live."""
    return f"gpudock/{namespace(user_name, user_id)}/{repository}"
