"""The web console: server-rendered pages beside the API on the same port,
logged in with a password and a session cookie, calling the same services."""
