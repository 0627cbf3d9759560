"""The built-in public image catalog and the image description every part shares.

Built-in entries are real public references (Docker Hub `pytorch/pytorch` and
`nvidia/cuda` tags) plus the local base image. Their torch architecture lists
come from `compat_data.json`, so the catalog and the doctor agree. Sizes are
0 (unknown) until the engine has the image; gpudock never guesses them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from gpudock.images import compat
from gpudock.messages import Message

PUBLIC, PRIVATE = "public", "private"
SERVICES_IMAGE = "gpudock/jupyter:bookworm"  # built by gpudock.images.service_image


@dataclass(frozen=True)
class ImageSpec:
    reference: str
    name: str
    description: str = ""
    os: str = ""
    python: str | None = None
    framework: str | None = None
    framework_version: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    min_driver: str | None = None
    compute_capabilities: tuple[str, ...] = ()  # () = no architecture constraint
    size_bytes: int = 0
    visibility: str = PUBLIC
    origin: str = "catalog"  # catalog | build | save | validated | manual
    owner_id: str | None = None
    id: str | None = None  # None for built-in entries
    on_host: bool | None = None  # on the engine now; None: not asked
    services: tuple[tuple[str, int], ...] = ()  # ports published on every instance of it

    def verdict(self, driver: str | None, cc: str | None) -> compat.Verdict:
        """Can this image run on a GPU of capability `cc` with driver `driver`?
        Metadata that does not parse (rows stored before it was validated) makes
        the answer 'not checked', never an error."""
        try:
            result = compat.check(
                cuda=self.cuda, driver=driver, cc=cc, archs=list(self.compute_capabilities) or None
            )
        except (ValueError, TypeError):
            unreadable = compat.Verdict()
            unreadable.not_checked(
                f"{self.reference}'s recorded CUDA version or GPU architectures do not parse"
            )
            return unreadable
        if cc is None and self.cuda is not None:
            result.not_checked(
                "gpudock does not know this GPU model's compute capability: "
                "the image's GPU architectures were not checked"
            )
        if self.min_driver and driver and compat.version(driver) < compat.version(self.min_driver):
            result.refuse(
                Message(
                    "{image} needs driver >= {needed}, this is {driver}",
                    image=self.reference,
                    needed=self.min_driver,
                    driver=driver,
                )
            )
        return result


def _torch(version: str, cuda: str, cudnn: str, python: str | None, os: str) -> ImageSpec:
    variant = "cu" + cuda.replace(".", "")
    wheel = compat.find_wheel(version, variant)
    archs = wheel.archs if wheel else ()
    toolkit = wheel.cuda if wheel and wheel.cuda else cuda  # the tag names only X.Y
    return ImageSpec(
        reference=f"pytorch/pytorch:{version}-cuda{cuda}-cudnn{cudnn}-runtime",
        name=f"PyTorch {version} / CUDA {cuda}",
        description=f"Official PyTorch {version} runtime image ({variant} wheel, cuDNN {cudnn}).",
        os=os,
        python=python,
        framework="pytorch",
        framework_version=version,
        cuda=toolkit,
        cudnn=cudnn,
        min_driver=compat.min_driver(toolkit),
        compute_capabilities=archs,
    )


def _cuda(tag: str, cudnn: str | None, os: str) -> ImageSpec:
    cuda = tag.split("-", 1)[0]  # '12.8.1-cudnn-runtime-ubuntu24.04': the exact toolkit
    return ImageSpec(
        reference=f"nvidia/cuda:{tag}",
        name=f"CUDA {cuda}" + (f" + cuDNN {cudnn}" if cudnn else ""),
        description=f"NVIDIA CUDA {cuda} runtime{' with cuDNN' if cudnn else ''} on {os}.",
        os=os,
        cuda=cuda,
        cudnn=cudnn,
        min_driver=compat.min_driver(cuda),
    )


def builtin_images(base_image: str) -> list[ImageSpec]:
    """The catalog's own entries (a new list each call; the entries are frozen)."""
    return list(_builtin_images(base_image))


@functools.lru_cache(maxsize=4)
def _builtin_images(base_image: str) -> tuple[ImageSpec, ...]:
    """Made once per base image: each entry's CUDA and driver floors are looked
    up in the compatibility data, thousands of version parses, and every create
    and start asks for them."""
    return (
        ImageSpec(
            reference=base_image,
            name="gpudock base (Debian bookworm)",
            description="The local base image: Debian 12 with python3, no CUDA and no torch. "
            "Runs on any GPU; install a torch wheel that fits (`gpudock-doctor` says which).",
            os="Debian 12",
            python="3.11",
        ),
        ImageSpec(
            reference=SERVICES_IMAGE,
            name="JupyterLab + TensorBoard (Debian bookworm)",
            description="The base image with JupyterLab and TensorBoard, started with the "
            "instance and opened from the console (logs in /root/data/tensorboard). "
            "Built locally: `gpudock images build-services`.",
            os="Debian 12",
            python="3.11",
            services=(("jupyter", 8888), ("tensorboard", 6006)),
        ),
        _torch("2.1.2", "11.8", "8", "3.10", "Ubuntu 22.04"),
        _torch("2.4.1", "12.4", "9", "3.11", "Ubuntu 22.04"),
        _torch("2.5.1", "12.4", "9", "3.11", "Ubuntu 22.04"),
        _torch("2.6.0", "12.6", "9", "3.11", "Ubuntu 22.04"),
        _torch("2.7.1", "12.8", "9", "3.11", "Ubuntu 22.04"),
        _torch("2.8.0", "12.8", "9", None, "Ubuntu 22.04"),
        _cuda("11.8.0-cudnn8-runtime-ubuntu22.04", "8", "Ubuntu 22.04"),
        _cuda("12.4.1-cudnn-runtime-ubuntu22.04", "9", "Ubuntu 22.04"),
        _cuda("12.8.1-cudnn-runtime-ubuntu24.04", "9", "Ubuntu 24.04"),
        _cuda("13.0.0-runtime-ubuntu24.04", None, "Ubuntu 24.04"),
    )


def with_size(spec: ImageSpec, size_bytes: int) -> ImageSpec:
    return replace(spec, size_bytes=size_bytes)


def with_presence(spec: ImageSpec, size_bytes: int | None) -> ImageSpec:
    """What the engine says of the image: its size where it has it, or that it has not."""
    if size_bytes is None:
        return replace(spec, on_host=False)
    return replace(spec, on_host=True, size_bytes=spec.size_bytes or size_bytes)
