"""`gpudock agent`: runs on each GPU host, dials the server, does what it is told.

It owns what must be local (the host's Docker Engine through its Unix socket,
NVML) and decides nothing; it never touches the server's database.
"""
