"""The link between the server and its agents: what both ends share.

An agent dials the server over TCP and then acts as the SSH server on that
connection (asyncssh's reverse direction); the server is the SSH client. Each
side pins the other's key: the agent the server key whose fingerprint its join
token carries, the server the agent key it recorded at enrollment. The server
side lives in `gpudock.agentgw`, the agent side in `gpudock.agent`; this
package holds the keys, the join token and the messages, and imports neither.
"""
