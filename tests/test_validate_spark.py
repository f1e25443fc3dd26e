"""`zabref validate --master spark://...`: the windows of a validation checked as a Spark job on a real standalone
cluster (a master and a worker on loopback, started as tests/test_spark_standalone.py starts them), with the command
run as a separate driver process. So a cluster master URL is known to work for validation, not assumed
(docs/validation.md, "Windows")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_spark_standalone import standalone  # noqa: F401 (the fixture)
from test_validate_windows import sim_logs

pytestmark = pytest.mark.slow


@pytest.mark.timeout(600)
def test_zabref_validate_runs_its_windows_on_a_standalone_cluster(standalone, tmp_path: Path) -> None:  # noqa: F811
    master_url, master_log = standalone
    logs = sim_logs(tmp_path / "logs", 3, 3000)
    p = subprocess.run([sys.executable, "-m", "zabref.cli", "validate", str(logs), "--window", "500", "--batch", "2",
                        "--master", master_url], capture_output=True, text=True, timeout=540)
    summary = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert "result=ok" in summary and "tlc_runs=3" in summary, summary
    assert "Registering app" in master_log.read_text(errors="replace")  # the job ran on this cluster
