#!/usr/bin/env python3
"""What does a SNAP cost to read as it arrives? A history's SNAP decoded whole and in socket-sized pieces.

Theory of operation: a SNAP is ZooKeeper's snapshot stream after the packet, with no length in front
(`zabref.core.zksnap`), so a quorum connection's `PacketDecoder` cannot know where it ends until it has read it. Its
`TreeReader` goes on from the last whole element at each piece; this script times decoding one SNAP of N
transactions (``--txns``, values of ``--value`` bytes) fed in one piece and in ``--piece``-byte pieces (a quorum
connection reads 64 KiB at a time), best of ``--rounds``, and prints the ratio. About 1 means reading in pieces
costs what reading once does; a reader that starts again from the stream's start at each piece grows with the
number of pieces instead.

    .venv/bin/python scripts/bench_snap.py [--txns 100000] [--value 100] [--piece 65536] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zabref.core import payloads  # noqa: E402
from zabref.core.packets import PacketType, QuorumPacket  # noqa: E402
from zabref.net import wire  # noqa: E402


def decode(body: bytes, piece: int) -> float:
    """Seconds to decode ``body`` fed in ``piece``-byte pieces (one SNAP comes out)."""
    decoder = wire.PacketDecoder()
    started = time.perf_counter()
    out = [p for k in range(0, len(body), piece) for p in decoder.feed(body[k:k + piece])]
    took = time.perf_counter() - started
    assert len(out) == 1 and out[0].type == PacketType.SNAP
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--txns", type=int, default=100_000)
    ap.add_argument("--value", type=int, default=100)
    ap.add_argument("--piece", type=int, default=65536)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    history = [((1 << 32) | k, b"v" * args.value) for k in range(1, args.txns + 1)]
    body = wire.encode_quorum_packet(QuorumPacket(PacketType.SNAP, history[-1][0], payloads.encode_snap_data(history)))
    whole = min(decode(body, len(body)) for _ in range(args.rounds))
    pieces = min(decode(body, args.piece) for _ in range(args.rounds))
    print(f"SNAP of {args.txns} transactions, {len(body)} bytes: whole {whole:.3f} s, "
          f"in {-(-len(body) // args.piece)} pieces of {args.piece} {pieces:.3f} s, ratio {pieces / whole:.2f}")


if __name__ == "__main__":
    main()
