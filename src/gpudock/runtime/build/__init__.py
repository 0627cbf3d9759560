"""Image builds, whatever the engine: a Dockerfile planned here (`plan`,
`words`) and an upload read here (`context`); an engine runs the plan
(`gpudock.runtime.docker.build`)."""
