"""`--master spark://...` on a real Spark standalone cluster: a master and a worker started on loopback with the
pyspark distribution's own launcher (``bin/spark-class``), then `zabref edges` run against it as a separate driver
process. So a cluster master URL is known to work, not assumed (docs/traces.md, "On a Spark cluster")."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(log: Path, text: str, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {log} within {timeout} s:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def standalone(tmp_path: Path):
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path), SPARK_WORKER_DIR=str(tmp_path / "w"))
    port = _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    try:
        master_log = tmp_path / "master.log"
        with open(master_log, "wb") as out:
            procs.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(_free_port())], env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True))
        _wait_for(master_log, "Successfully started service 'sparkMaster'", procs[0])
        worker_log = tmp_path / "worker.log"
        with open(worker_log, "wb") as out:
            procs.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
                 "--cores", "2", "--memory", "2g", "--webui-port", str(_free_port())], env=env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True))
        _wait_for(worker_log, "Successfully registered with master", procs[1])
        yield master_url, master_log
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(30)


@pytest.mark.deep
def test_zabref_edges_runs_on_a_standalone_cluster(standalone, tmp_path: Path) -> None:
    from conformance.graph.cache import ensure_traces

    master_url, master_log = standalone
    graph = ensure_traces("tiny") / "graph.parquet"
    p = subprocess.run([sys.executable, "-m", "zabref.cli", "edges", "--graph", str(graph), "--master", master_url,
                        "--out", str(tmp_path / "edges")], capture_output=True, text=True, timeout=600)
    summary = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert f"mode=spark {master_url}" in summary and "disagreed=0" in summary
    assert int(summary.split("checked=")[1].split()[0]) > 30_000
    assert "Registering app" in master_log.read_text(errors="replace")  # the job ran on this cluster
