"""Service URLs: the authenticated HTTP and WebSocket proxy into instances
(`app` routes and authorises, `upstream` speaks HTTP to the instance,
`websocket` relays WebSockets, `headers` decides what crosses). See docs/services.md."""
