"""Image builds: a Dockerfile planned here (`plan`, `words`), an upload read here
(`context`), and the plan run on an engine (`docker`)."""
