"""What crosses a socket: the wire codec, connections between servers, the client and control ports, TLS.

Theory of operation: `wire` turns packets into bytes and back (sans-IO); `peers` carries them between servers
(handshake, framing, bounded buffers, dialing); `clientport` and `control` serve the client and control ports;
`security` guards every port (TLS, quorum authentication); `ports` leases loopback port blocks for local clusters.
Each only carries inputs to a `zabref.core.node.Node` and its effects out; no protocol decision is made here.
"""
