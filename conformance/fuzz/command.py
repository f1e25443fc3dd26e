"""``zabref fuzz`` (and ``python -m conformance.fuzz``): start a cluster with a ghost, run the fuzzer, print the
report."""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from pathlib import Path
from typing import Any

import click

from conformance.fuzz.harness import RUNNING, Fuzzer, fuzz_cluster
from zabref.client import ZabClient
from zabref.config import Security
from zabref.net.security import client_context
from zabref.runtime.cluster import LocalCluster

__all__ = ["fuzz_command", "DEFAULT_INPUTS"]

DEFAULT_INPUTS = 2000


@click.command("fuzz")
@click.option("--inputs", type=click.IntRange(1), default=lambda: int(os.environ.get("ZABREF_FUZZ_INPUTS",
                                                                                      DEFAULT_INPUTS)),
              show_default=f"$ZABREF_FUZZ_INPUTS or {DEFAULT_INPUTS}", help="How many inputs to throw.")
@click.option("--seed", type=int, default=0, show_default=True, help="Input i is built from random.Random('SEED:i').")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Where the cluster lives (default: a new temporary folder, kept for its logs).")
@click.option("--include-known", is_flag=True, help="Also throw the kinds of input with a known open issue.")
@click.option("--secure", is_flag=True,
              help="TLS on every port and quorum authentication, with throwaway certificates (needs trustme, a "
                   "dev dependency); adds the kinds that test each gate.")
def fuzz_command(inputs: int, seed: int, data_dir: str | None, include_known: bool, secure: bool) -> None:
    """Start a 3-server cluster and throw bad input at every port of every server (docs/fuzzing.md)."""
    from tqdm import tqdm  # noqa: PLC0415 (the progress bar loads only when a long run starts)

    folder = Path(data_dir or tempfile.mkdtemp(prefix="zabref-fuzz-"))
    security, stranger = throwaway_security(folder / "security") if secure else (Security(), None)
    path = fuzz_cluster(folder, security=security)
    cluster = LocalCluster(path)
    try:
        for sid in RUNNING:
            cluster[sid].start()
        for sid in RUNNING:
            cluster[sid].wait_ready()
        client_tls = client_context(security) if security.client_tls else None
        with ZabClient(cluster.client_addresses(), attempts=60, tls=client_tls) as c:
            c.submit("before-fuzz")
        with tqdm(total=inputs, unit="input", mininterval=2, disable=None) as bar:
            report = Fuzzer(cluster, inputs=inputs, seed=seed, include_known=include_known,
                            progress=bar.update, stranger=stranger).run()
    finally:
        cluster.stop()
    click.echo(report.summary())
    click.echo(f"cluster folder (logs): {folder}")
    click.echo(f"fuzz: {inputs} inputs, {len(report.problems)} problems")
    raise SystemExit(1 if report.problems else 0)


def throwaway_security(folder: Path) -> tuple[Any, ssl.SSLContext]:
    """A CA, a certificate for loopback and a quorum secret in ``folder`` (TLS and authentication both on), and a
    client context with another CA's certificate (the stranger). Made with trustme, a dev dependency."""
    try:
        import trustme  # noqa: PLC0415 (test-only dependency, used only with --secure)
    except ImportError:
        raise click.ClickException("--secure needs trustme (pip install -e '.[dev]')") from None

    folder.mkdir(parents=True, exist_ok=True)
    ca, other = trustme.CA(), trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1", "::1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(folder / "server.pem"))
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    secret = folder / "quorum.secret"
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, secrets.token_hex(32).encode() + b"\n")
    os.close(fd)
    stranger = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    stranger.check_hostname, stranger.verify_mode = False, ssl.CERT_NONE
    with tempfile.TemporaryDirectory() as tmp:
        pem = Path(tmp) / "stranger.pem"
        other.issue_cert("stranger.invalid").private_key_and_cert_chain_pem.write_to_path(str(pem))
        stranger.load_cert_chain(str(pem))
    return Security(quorum_tls=True, client_tls=True, cert=folder / "server.pem", key=folder / "server.pem",
                    ca=folder / "ca.pem", quorum_secret=secret), stranger
