"""The services image `gpudock/jupyter:bookworm`: the local base image plus
JupyterLab and TensorBoard, started by the image's entry point.

Builds run without network, so the Python packages come from a wheelhouse
that pip fetches on this machine (`fetch_wheelhouse`, cached per requirement
set under the cache directory) for the base image's Python and this machine's
architecture; the build installs from it with `--no-index`. The packages go
into a venv at `/opt/gpudock-services` (first on PATH, with pip, so users can
add their own), not into Debian's Python.

The entry point (`init.sh`) runs `gpudock-service jupyter` and `gpudock-service
tensorboard` (`launcher.sh`, also what "Start JupyterLab" runs in other
images) and then the container's command. A tag already built from the same
recipe (label `org.gpudock.services-recipe`) is reused unless `force` is set.
"""

from __future__ import annotations

import hashlib
import io
import logging
import platform
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Protocol

from gpudock.errors import RuntimeFailure
from gpudock.images.catalog import SERVICES_IMAGE

BASE_PYTHON = "3.11"  # Debian bookworm's
REQUIREMENTS = ("jupyterlab>=4.2,<5", "tensorboard>=2.17,<3", "pip")
RECIPE_LABEL = "org.gpudock.services-recipe"
RECIPE_REVISION = "2"  # how the image is built changed (its labels): rebuild
SERVICES_LABEL = "org.gpudock.services"
VENV = "/opt/gpudock-services"
LAUNCHER_PATH = "/usr/local/bin/gpudock-service"
INIT_PATH = "/usr/local/bin/gpudock-services-init"
PIP_TIMEOUT_S = 1800
log = logging.getLogger(__name__)


def launcher_script() -> str:
    """`gpudock-service NAME`, as a shell script (see launcher.sh)."""
    return (resources.files(__package__) / "launcher.sh").read_text()


def _init_script() -> str:
    return (resources.files(__package__) / "init.sh").read_text()


def dockerfile(base_image: str) -> str:
    return f"""FROM {base_image}
COPY wheels /tmp/wheels
RUN python3 -m venv --without-pip {VENV} \\
 && {VENV}/bin/python "$(ls /tmp/wheels/pip-*.whl)/pip" install --no-index --no-cache-dir \\
    --find-links /tmp/wheels --disable-pip-version-check {" ".join(_quoted(REQUIREMENTS))}
COPY launcher.sh {LAUNCHER_PATH}
COPY init.sh {INIT_PATH}
RUN chmod 0755 {LAUNCHER_PATH} {INIT_PATH} && mkdir -p /root/data/tensorboard
ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /root
ENTRYPOINT ["{INIT_PATH}"]
"""


def _quoted(words: tuple[str, ...]) -> list[str]:
    return [f"'{w}'" for w in words]


def recipe_digest(base_image_id: str) -> str:
    """What the image is made of: the base image, the requirements, the scripts."""
    parts = [
        base_image_id,
        *REQUIREMENTS,
        launcher_script(),
        _init_script(),
        platform.machine(),
        RECIPE_REVISION,
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "gpudock" / "wheelhouse"


def _platform_tags() -> list[str]:
    machine = platform.machine()
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(36, 16, -1)]
    return [*tags, f"manylinux2014_{machine}", f"linux_{machine}", "any"]


def fetch_wheelhouse(cache_dir: Path) -> Path:
    """Download every wheel the requirements need for the base image's Python,
    once per requirement set; the directory that holds them."""
    key = hashlib.sha256("\n".join([*REQUIREMENTS, platform.machine()]).encode()).hexdigest()
    target = cache_dir / key[:16]
    if (target / ".complete").exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(target)]
    command += ["--only-binary=:all:", "--python-version", BASE_PYTHON]
    command += ["--implementation", "cp", "--abi", "cp" + BASE_PYTHON.replace(".", "")]
    for tag in _platform_tags():
        command += ["--platform", tag]
    try:
        done = subprocess.run(
            [*command, *REQUIREMENTS], capture_output=True, text=True, timeout=PIP_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeFailure(f"could not run pip to fetch the services' wheels: {exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeFailure(
            f"pip could not fetch the wheels for JupyterLab and TensorBoard ({detail}); "
            "this step needs PyPI (or a mirror in pip's configuration)"
        )
    (target / ".complete").write_text("\n".join(REQUIREMENTS) + "\n")
    return target


def context_archive(wheelhouse: Path, directory: Path) -> Path:
    """The build context as a tar: the wheels and the two scripts."""
    path = directory / "services-context.tar"
    with tarfile.open(path, "w") as tar:
        for wheel in sorted(wheelhouse.glob("*.whl")):
            tar.add(wheel, arcname=f"wheels/{wheel.name}")
        for name, text in (("launcher.sh", launcher_script()), ("init.sh", _init_script())):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return path


class StoredImage(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def labels(self) -> dict[str, str]: ...


class ServicesEngine(Protocol):
    """What building the services image needs of a container engine."""

    def image_info(self, ref: str) -> StoredImage | None: ...

    def build_local_image(
        self, dockerfile: str, context_tar: Path, tag: str, labels: dict[str, str]
    ) -> str:
        """Build a trusted Dockerfile (no network, sandboxed steps) as `tag`; the image id."""
        ...


@dataclass(frozen=True)
class ServicesImageResult:
    tag: str
    image_id: str
    cached: bool


def build_services_image(
    engine: ServicesEngine,
    *,
    base_image: str,
    tag: str = SERVICES_IMAGE,
    cache_dir: Path | None = None,
    force: bool = False,
) -> ServicesImageResult:
    """Build the services image from `base_image` unless the engine has one from
    the same recipe."""
    base = engine.image_info(base_image)
    if base is None:
        raise RuntimeFailure(
            f"the base image {base_image} is not on the engine: `gpudock images build-base` first"
        )
    recipe = recipe_digest(base.id)
    existing = engine.image_info(tag)
    if existing is not None and existing.labels.get(RECIPE_LABEL) == recipe and not force:
        return ServicesImageResult(tag=tag, image_id=existing.id, cached=True)
    wheelhouse = fetch_wheelhouse(cache_dir or default_cache_dir())
    labels = {RECIPE_LABEL: recipe, SERVICES_LABEL: "jupyter:8888,tensorboard:6006"}
    with tempfile.TemporaryDirectory(prefix="gpudock-services-") as scratch:
        archive = context_archive(wheelhouse, Path(scratch))
        image_id = engine.build_local_image(dockerfile(base.id), archive, tag, labels)
    log.info("built %s (%s)", tag, image_id)
    return ServicesImageResult(tag=tag, image_id=image_id, cached=False)
