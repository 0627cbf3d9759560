"""Container runtimes behind the `Runtime` Protocol (`base`): one documented
contract per operation on containers, images, volumes, networks, exec streams,
builds and data moves. `docker` implements it over the Docker Engine; `fake`
in memory, for tests; `build` plans a Dockerfile, whatever the engine."""
