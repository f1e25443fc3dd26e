"""What the two client halves of `zabref.core.node.Node` ask of the node they are part of.

Theory of operation: `Node` is one class made of three parts -- itself, `clients.ClientRequests` (zabref's client
protocol) and `zkclients.ZkClients` (ZooKeeper's) -- and each half uses a few of the node's fields and methods.
`NodeParts` declares them once, so that the type checker follows a half's call into the node, and so that a compiled
build (mypyc: docs/performance.md, "A compiled build") can lay the halves out as traits, the only classes it lets
one class inherit several of. The methods here are never run: `Node` (or, for `zk_propose`, `ZkClients`, and for
`_not_serving`, `ClientRequests`) defines each, and comes before this class in `Node`'s method order.
"""

from __future__ import annotations

from typing import Any

from mypy_extensions import trait

from zabref.core.effects import EffectsBuilder, Timing
from zabref.core.packets import QuorumPacket
from zabref.core.zab import Output, ZabCore

__all__ = ["NodeParts"]


@trait
class NodeParts:
    """The node's fields and methods its client halves use (module docstring)."""

    sid: int
    timing: Timing
    core: ZabCore
    leader_lost: bool

    @property
    def committed_zxid(self) -> int:
        raise NotImplementedError  # Node's

    def _core(self, out: EffectsBuilder, output: Output, now: float, action: str | None,
              packet: QuorumPacket | None = None, tag: int | None = None, **params: int) -> None:
        raise NotImplementedError  # Node's

    def zk_propose(self, out: EffectsBuilder, session: int, cxid: int, op: int, record: bytes, now: float) -> None:
        raise NotImplementedError  # ZkClients'

    def _not_serving(self) -> dict[str, Any]:
        raise NotImplementedError  # ClientRequests'
