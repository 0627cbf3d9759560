"""The SSH gateway (asyncssh): one port for every instance; see docs/architecture.md.

gateway.py   start/stop on the API's event loop, host key, listener options
listener.py  the TCP listener: asyncssh's packets leave in one send() per loop turn
server.py    one connection: public-key auth, deny-by-default hooks, audit
session.py   shell / exec / sftp channels bridged to a process in the instance
forward.py   `-L`/`-W` to ports inside the instance, through a relay in it
bridge.py    bytes between a channel and an exec stream, with flow control
commands.py  what runs inside the instance for each kind of channel
"""
