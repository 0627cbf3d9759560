"""Service URLs: the authenticated HTTP and WebSocket proxy into instances
(`app` routes and authorises, `upstream` pools connections into instances and
`exchange` speaks HTTP/1.1 on them, `websocket` relays WebSockets, `headers`
decides what crosses). See docs/services.md."""
