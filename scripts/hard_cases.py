"""Count the synchronization cases a model's state graph reaches (issue 13: models that reach the hard cases).

    .venv/bin/python scripts/hard_cases.py .cache/traces/ci-<hash>/graph.parquet

Theory of operation: reads the graph `zabref traces --parquet` wrote (edges, then only the source states of the
edges it needs) and, for every FollowerProcessTRUNC, -DIFF and -SNAP edge, looks at the source state: the packet at
the head of the leader's channel to the follower and what follows it there, and the follower's history. It counts
TRUNCs to a non-empty prefix (the packet's zxid is not 0), TRUNCs with PROPOSALs queued behind them, and DIFFs and
SNAPs sent to a follower whose history is not empty. Prints one line per count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SYNC = ("FollowerProcessTRUNC", "FollowerProcessDIFF", "FollowerProcessSNAP")


def count(graph: Path) -> dict[str, int]:
    edges = pq.read_table(graph / "edges", columns=["src", "action", "params_json"])
    chosen = edges.filter(pc.is_in(edges["action"], value_set=pa.array(SYNC))).to_pylist()
    sources = {e["src"] for e in chosen}
    states: dict[int, dict] = {}
    for part in sorted((graph / "nodes").glob("*.parquet")):
        table = pq.read_table(part, columns=["id", "state_json"])
        for k, node in enumerate(table["id"].to_pylist()):
            if node in sources:
                states[node] = json.loads(table["state_json"][k].as_py())
    counts = dict.fromkeys(["TRUNC", "TRUNC to a non-empty prefix", "TRUNC with PROPOSALs behind it",
                            "TRUNC to a non-empty prefix with PROPOSALs behind it", "DIFF",
                            "DIFF to a follower with a non-empty history", "SNAP",
                            "SNAP to a follower with a non-empty history"], 0)
    for e in chosen:
        params = json.loads(e["params_json"])
        i, j = params["i"], params["j"]
        state = states[e["src"]]
        channel, history = state["msgs"][j - 1][i - 1], state["history"][i - 1]
        kind = e["action"].removeprefix("FollowerProcess")
        counts[kind] += 1
        if kind == "TRUNC":
            nonempty = channel[0]["zxid"] != [0, 0]
            behind = any(m["type"] == "PROPOSAL" for m in channel[1:])
            counts["TRUNC to a non-empty prefix"] += nonempty
            counts["TRUNC with PROPOSALs behind it"] += behind
            counts["TRUNC to a non-empty prefix with PROPOSALs behind it"] += nonempty and behind
        elif history:
            counts[f"{kind} to a follower with a non-empty history"] += 1
    return counts


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (Path(argv[0]) / "edges").is_dir():
        print("usage: hard_cases.py GRAPH.parquet (a folder holding edges/ and nodes/)", file=sys.stderr)
        return 2
    for name, n in count(Path(argv[0])).items():
        print(f"{name}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
