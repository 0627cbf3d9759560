"""The Docker Engine runtime, through docker-py's low-level `APIClient`, and
the only place gpudock imports docker-py.

- `engine`: `DockerRuntime`, the `Runtime` seam, composed of the rest:
- `containers`: instance containers and their sandbox (`ALLOWED_CAPABILITIES`);
- `images`: images, pulls, and the base image's import;
- `volumes`: data volumes, size-limited ones, and the copy that moves them;
- `networks`: tenant networks and the host firewall that keeps them off the host;
- `exec`: the attached exec streams of the SSH gateway (runc, or `docker exec`);
- `checks`: throwaway check containers (`run_once`);
- `build`: running a build plan (`gpudock.runtime.build`) step by step;
- `translate`: the engine's answers as gpudock types, its errors as gpudock errors.
"""

from gpudock.runtime.base import ALLOWED_CAPABILITIES
from gpudock.runtime.docker.engine import DockerRuntime

__all__ = ["ALLOWED_CAPABILITIES", "DockerRuntime"]
