"""What a simulated run is asked to do (`Options`) and what it found (`Result`).

Theory of operation: a run is a pure function of its seed and its `Options`; `FAULTS` lists the fault kinds a run may
enable (docs/simulation.md says what each does), `SERVER_COUNTS` the cluster sizes. `Result.replay` is the command
that repeats the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FAULTS", "OWN_SOURCE", "SERVER_COUNTS", "Options", "Result"]

FAULTS = ("reset", "partition", "crash", "cluster_power", "sync_crash", "fsync_crash", "torn_write", "slow_disk",
          "client_retry", "pause")
#: Kinds added after the first CI seeds were recorded: each draws from a random source of its own (``<seed>:<kind>``),
#: so that a seed whose swarm leaves them out runs exactly as it did before they existed.
OWN_SOURCE = ("pause",)
SERVER_COUNTS = (3, 5, 7)


@dataclass(frozen=True)
class Options:
    """What a run is, besides its seed. ``faults`` None: swarm (the seed picks a subset of `FAULTS` and rates)."""

    servers: int = 3
    steps: int = 1000
    faults: tuple[str, ...] | None = None
    clients: int = 2
    readers: int = 0  # clients that read (plain, and sync + read), checked for consistency at the end
    liveness_s: float = 30.0
    max_time: float = 300.0
    tick_ms: int = 100
    init_limit: int = 10
    sync_limit: int = 5
    validate: bool = False  # keep every server's action log and check it with TLC at the end (sim.validation)
    leader_logs_late: bool = False  # the servers' [cluster] leader_logs_late (spec/Zab.tla's LeaderLogsLate)

    def __post_init__(self) -> None:
        if self.servers not in SERVER_COUNTS:
            raise ValueError(f"servers = {self.servers}: the simulator runs {', '.join(map(str, SERVER_COUNTS))}")
        if self.steps < 1 or self.clients < 0 or self.readers < 0:
            raise ValueError(f"steps = {self.steps}, clients = {self.clients}, readers = {self.readers}: steps >= 1, "
                             "clients >= 0, readers >= 0")
        unknown = sorted(set(self.faults or ()) - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown} (known: {', '.join(FAULTS)})")

    def command(self, seed: int) -> str:
        """The command line that repeats a run of these options with ``seed``."""
        parts = [f"zabref simulate --seed {seed} --servers {self.servers} --steps {self.steps}"]
        if self.faults is not None:
            parts.append(f"--faults {','.join(self.faults) or 'none'}")
        default = Options()
        for name in ("clients", "readers", "liveness_s", "max_time"):
            if getattr(self, name) != getattr(default, name):
                parts.append(f"--{name.replace('_', '-')} {getattr(self, name)}")
        if self.validate:
            parts.append("--validate")
        if self.leader_logs_late:
            parts.append("--leader-logs-late")
        return " ".join(parts)


@dataclass
class Result:
    seed: int
    options: Options
    failure: str | None
    steps: int
    virtual_s: float
    faults: dict[str, float]  # enabled kinds and their rates (per virtual second)
    injected: dict[str, int]
    acked: int
    digest: str
    events: list[str] = field(repr=False)
    reads: int = 0  # reads the readers recorded (all checked at the end of a run that got there)

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def replay(self) -> str:
        return self.options.command(self.seed)
