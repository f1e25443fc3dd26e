"""The implementation's one exception tree.

Theory of operation: every error zabref raises is a `ZabError`. Protocol errors say who is at fault -- a
`LocalProtocolError` is this server's caller misusing the core (a bug here), a `RemoteProtocolError` is a peer sending
something the protocol forbids in the current phase (the connection to that peer is closed). Codec errors name the
byte offset; log corruption names the file, the record number and its offset.
"""

from __future__ import annotations


class ZabError(Exception):
    """Root of every error zabref raises."""


class ConfigError(ZabError):
    """A configuration file or option is wrong; the message names the file and the key."""


class CodecError(ZabError):
    """Bytes that do not decode to a packet: names what was being decoded and the byte offset."""

    def __init__(self, what: str, offset: int, reason: str) -> None:
        super().__init__(f"cannot decode {what} at byte {offset}: {reason}")
        self.what = what
        self.offset = offset
        self.reason = reason


class ProtocolError(ZabError):
    """A packet or event that the protocol does not allow in the current state."""


class LocalProtocolError(ProtocolError):
    """This server's own caller misused the core (a bug in zabref, not in a peer)."""


class RemoteProtocolError(ProtocolError):
    """A peer sent something the protocol forbids here; the connection to it is closed."""

    def __init__(self, peer: int, message: str) -> None:
        super().__init__(f"peer {peer}: {message}")
        self.peer = peer


class StorageError(ZabError):
    """The data directory cannot be read or written (permissions, disk full, missing directory)."""


class LogCorruption(StorageError):
    """A record in the middle of the transaction log fails its check: the server must not start on it."""

    def __init__(self, path: str, record: int, offset: int, reason: str) -> None:
        super().__init__(f"{path}: record {record} at byte {offset}: {reason}")
        self.path = path
        self.record = record
        self.offset = offset
        self.reason = reason
