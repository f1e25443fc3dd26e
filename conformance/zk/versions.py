"""ZooKeeper versions: a version string to the jars that run it.

Theory of operation
-------------------
Two sources, by version (../shared/ZOOKEEPER.md, "Where each version comes from"):

* ``3.8.0`` is Debian's ``zookeeper`` package. `find_classpath` finds ``zookeeper.jar`` in /usr/share/java (its
  manifest's Class-Path names netty, jute, slf4j-api, ...) and adds ``slf4j-simple.jar``: Debian ships no logback, so
  this server logs through slf4j-simple. `ensure_zookeeper` runs ``apt-get install -y zookeeper`` (through ``sudo -n``
  when not root) when the jar is missing.
* ``3.8.3`` .. ``3.8.7`` and ``3.9.0`` .. ``3.9.5`` come from Maven Central. `fetch` writes a small pom that depends on
  ``org.apache.zookeeper:zookeeper:<version>``, on ``logback-classic`` -- 3.9 declares logback optional, so it does
  not come transitively -- and on ``metrics-core`` and ``snappy-java``, which ZooKeeper's pom marks "provided" (its
  release tarball ships them; without metrics-core the server dies at start), each at the version ZooKeeper's own
  parent pom pins (the parent is imported as a BOM), and runs ``mvn -q -B dependency:copy-dependencies`` on it. The jars land in a temporary folder of the cache, which
  is renamed to ``<cache>/zookeeper/<version>/`` only once complete (with ``fetched.json``: the jars and how long the
  fetch took), so a fetch cut short is never used, and a second call is a directory listing.

The cache is ``$ZABREF_CACHE``, else ``$XDG_CACHE_HOME/zabref``, else ``~/.cache/zabref``: outside the repository.
`resolve` is the one entry point: a `Distribution` (its jars, where they came from, which logging backend they
carry). An unknown version, a missing apt-get or a failing mvn is a `ZkFetchError` that says what to do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from conformance.tla.javac import cache_root
from conformance.zk import ZkFetchError

__all__ = ["ACKS_BEFORE_NEWLEADER", "DEBIAN_VERSION", "MAVEN_VERSIONS", "SUPPORTED", "Distribution",
           "acks_before_newleader", "apt_install", "available", "cache_root", "cached", "defers", "ensure_zookeeper",
           "fetch", "find_classpath", "install_failed", "model_of", "resolve"]

DEBIAN_VERSION = "3.8.0"
MAVEN_VERSIONS = tuple([f"3.8.{n}" for n in range(3, 8)] + [f"3.9.{n}" for n in range(0, 6)])
SUPPORTED = (DEBIAN_VERSION, *MAVEN_VERSIONS)
#: The first version whose follower persists at NEWLEADER only what its sync COMMITted (ZOOKEEPER-4394's work).
DEFERS_FROM = (3, 9, 3)


#: The versions whose follower logs its sync's proposals at NEWLEADER through its SyncRequestProcessor, which ACKs
#: each as it is flushed while the QuorumPeer thread goes on to ACK NEWLEADER (`Learner.syncWithLeader`'s
#: `fzk.logRequest` loop, read in the released source): [first, end) pairs. ZOOKEEPER-4785's fix (PR 2111; 3.8.5,
#: 3.9.2) appends them and ACKs them at UPTODATE instead.
ACKS_BEFORE_NEWLEADER = (((3, 8, 0), (3, 8, 5)), ((3, 9, 0), (3, 9, 2)))


def _release(version: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in version.split("."))
    except ValueError:
        return None


def acks_before_newleader(version: str) -> bool:
    """Whether ZooKeeper ``version``'s follower may ACK a proposal of its sync before it ACKs NEWLEADER, the order
    ZOOKEEPER-4685 describes (`ACKS_BEFORE_NEWLEADER`); a version that is not a release number does not."""
    v = _release(version)
    return v is not None and any(first <= v < end for first, end in ACKS_BEFORE_NEWLEADER)


def defers(version: str) -> bool:
    """Whether ZooKeeper ``version``'s follower may leave a sync's uncommitted proposals for UPTODATE (Zab.tla's
    NewLeaderDefers, spec/README.md departure 12: 3.9.3 and later); a version that is not a release number (a
    hand-built recording's) does not."""
    v = _release(version)
    return v is not None and v >= DEFERS_FROM


def model_of(version: str) -> str:
    """The spec model whose follower is ``version``'s (spec/README.md, departures 11 and 12): every supported version
    truncates at TRUNC (`cizk`); 3.9.3 and later also leave a sync's uncommitted proposals for UPTODATE (`cizk39`)."""
    _check_version(version)
    return "cizk39" if defers(version) else "cizk"


JAR_DIRS = (Path("/usr/share/java"), Path("/usr/share/zookeeper"), Path("/usr/share/zookeeper/lib"))
#: The dependency plugin, pinned so a fetch does the same on every machine.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
MVN_TIMEOUT_S = 900
#: Bumped when the pom changes, so that a cache filled by an older recipe is fetched again.
RECIPE = 2

Echo = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Distribution:
    """One runnable ZooKeeper: its version, its jars (in classpath order), where they came from, and its slf4j
    backend (``logback`` or ``slf4j-simple``), which says which logging config the servers get."""

    version: str
    jars: tuple[Path, ...]
    source: str
    logging: str

    @property
    def classpath(self) -> str:
        return os.pathsep.join(str(j) for j in self.jars)

    @staticmethod
    def from_classpath(classpath: str, version: str = "unknown", source: str = "given") -> Distribution:
        """A distribution for a classpath someone built by hand (e.g. their own ZooKeeper build)."""
        jars = tuple(Path(p) for p in classpath.split(os.pathsep) if p)
        return Distribution(version, jars, source, logging_backend(jars))


def logging_backend(jars: tuple[Path, ...]) -> str:
    names = [j.name for j in jars]
    if any(n.startswith("logback-classic") for n in names):
        return "logback"
    if any(n.startswith("slf4j-simple") for n in names):
        return "slf4j-simple"
    return "none"


# --- Debian's package ----------------------------------------------------------------------------------------------


def find_classpath() -> str | None:
    """The classpath of Debian's ZooKeeper (``zookeeper.jar`` + ``slf4j-simple.jar``), or None when not installed."""
    for d in JAR_DIRS:
        jar = d / "zookeeper.jar"
        if jar.is_file():
            extra = [d / "slf4j-simple.jar"] if (d / "slf4j-simple.jar").is_file() else []
            return os.pathsep.join(str(p) for p in [jar, *extra])
    return None


def apt_install(package: str, echo: Echo = print, *, alternative: str) -> subprocess.CompletedProcess[str] | None:
    """``apt-get install -y <package>`` (through ``sudo -n`` when not root); None when apt-get is not available.
    Raises ZkFetchError (ending with ``alternative``, what the user can do instead) when it cannot even try."""
    if shutil.which("apt-get") is None:
        return None
    cmd = ["apt-get", "install", "-y", package]
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise ZkFetchError(f"{package} is not installed and this user is not root (no sudo): run "
                               f"`sudo apt-get install -y {package}`, or {alternative}")
        cmd = ["sudo", "-n", *cmd]
    echo(f"installing {package}: {' '.join(cmd)}")
    return subprocess.run(cmd, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), capture_output=True,
                          text=True)


def install_failed(done: subprocess.CompletedProcess[str], alternative: str) -> ZkFetchError:
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-8:])
    return ZkFetchError(f"`{' '.join(done.args)}` failed (exit {done.returncode}); install it by hand or "
                        f"{alternative}:\n{tail}")


def ensure_zookeeper(echo: Echo = print, alternative: str = "run with --systems zabref") -> str:
    """The classpath of Debian's ZooKeeper 3.8.0; installs the ``zookeeper`` package with apt first when missing."""
    cp = find_classpath()
    if cp is not None:
        return cp
    if shutil.which("java") is None:
        raise ZkFetchError("ZooKeeper needs java on PATH (e.g. apt-get install -y openjdk-17-jre-headless)")
    done = apt_install("zookeeper", echo, alternative=alternative)
    if done is None:
        raise ZkFetchError("zookeeper.jar not found in /usr/share/java and apt-get is not available: install "
                           f"Apache ZooKeeper 3.8 and put zookeeper.jar there, or {alternative}")
    cp = find_classpath()
    if done.returncode != 0 or cp is None:
        raise install_failed(done, alternative)
    return cp


# --- Maven Central -------------------------------------------------------------------------------------------------


POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- generated by zabref (conformance/zk/versions.py): the runtime classpath of ZooKeeper {version} -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>zabref.fetch</groupId>
  <artifactId>zookeeper-{version}-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement>
    <dependencies>
      <!-- ZooKeeper's own parent pom pins the versions it was released with, logback's among them -->
      <dependency>
        <groupId>org.apache.zookeeper</groupId>
        <artifactId>parent</artifactId>
        <version>{version}</version>
        <type>pom</type>
        <scope>import</scope>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>org.apache.zookeeper</groupId>
      <artifactId>zookeeper</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>ch.qos.logback</groupId>
      <artifactId>logback-classic</artifactId>
    </dependency>
    <!-- "provided" in ZooKeeper's pom, shipped in its release tarball's lib/: the server needs them at run time -->
    <dependency>
      <groupId>io.dropwizard.metrics</groupId>
      <artifactId>metrics-core</artifactId>
    </dependency>
    <dependency>
      <groupId>org.xerial.snappy</groupId>
      <artifactId>snappy-java</artifactId>
    </dependency>
  </dependencies>
</project>
"""


def _version_dir(version: str) -> Path:
    return cache_root() / "zookeeper" / version


def _check_version(version: str) -> None:
    if version not in SUPPORTED:
        raise ZkFetchError(f"ZooKeeper {version!r} is not supported; supported: {', '.join(SUPPORTED)} "
                           f"(3.8.0 from Debian's package, the others from Maven Central)")


def cached(version: str) -> Distribution | None:
    """The fetched distribution of a Maven version, or None when it is not in the cache."""
    folder = _version_dir(version)
    try:
        info = json.loads((folder / "fetched.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    jars = tuple(folder / "jars" / name for name in info.get("jars", []))
    if info.get("recipe") != RECIPE or not jars or not all(j.is_file() for j in jars):
        return None
    return Distribution(version, jars, f"maven ({folder})", logging_backend(jars))


def fetch(version: str, echo: Echo = print) -> Distribution:
    """The jars of a Maven version, fetched with mvn into the cache on first use."""
    _check_version(version)
    if version == DEBIAN_VERSION:
        raise ZkFetchError(f"ZooKeeper {DEBIAN_VERSION} comes from Debian's package, not from Maven")
    have = cached(version)
    if have is not None:
        return have
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ZkFetchError(f"fetching ZooKeeper {version} needs mvn (Maven) on PATH: apt-get install -y maven")
    parent = _version_dir(version).parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".fetch-{version}-", dir=parent))
    try:
        (tmp / "pom.xml").write_text(POM.format(version=version), encoding="utf-8")
        echo(f"fetching ZooKeeper {version} from Maven Central into {_version_dir(version)}")
        started = time.monotonic()
        try:
            done = subprocess.run([mvn, "-q", "-B", "-f", str(tmp / "pom.xml"), f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                                   "-DincludeScope=runtime", f"-DoutputDirectory={tmp / 'jars'}"],
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=MVN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ZkFetchError(f"mvn did not finish fetching ZooKeeper {version} within {MVN_TIMEOUT_S} s") from None
        seconds = time.monotonic() - started
        jars = sorted(p.name for p in (tmp / "jars").glob("*.jar")) if (tmp / "jars").is_dir() else []
        if done.returncode != 0 or f"zookeeper-{version}.jar" not in jars:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-12:])
            raise ZkFetchError(f"mvn could not fetch ZooKeeper {version} (exit {done.returncode}; pom "
                               f"org.apache.zookeeper:zookeeper:{version} from Maven Central):\n{tail}")
        # zookeeper's own jar first, so its classes win over any duplicate
        ordered = sorted(jars, key=lambda n: (not n.startswith("zookeeper-"), n))
        (tmp / "fetched.json").write_text(json.dumps({"version": version, "recipe": RECIPE, "jars": ordered, "seconds": round(seconds, 2),
                                                      "fetched_at": time.time()}, indent=1) + "\n", encoding="utf-8")
        final = _version_dir(version)
        if final.exists() and cached(version) is None:  # left by an older recipe: replaced
            shutil.rmtree(final, ignore_errors=True)
        try:
            tmp.rename(final)
        except OSError:  # another process finished the same fetch meanwhile: keep that one
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    have = cached(version)
    if have is None:
        raise ZkFetchError(f"ZooKeeper {version} was fetched but {_version_dir(version)} is not complete")
    echo(f"fetched ZooKeeper {version} in {seconds:.1f} s ({len(have.jars)} jars)")
    return have


def resolve(version: str, echo: Echo = print) -> Distribution:
    """The distribution of ``version``: installed from Debian or fetched from Maven Central when needed."""
    _check_version(version)
    if version == DEBIAN_VERSION:
        cp = ensure_zookeeper(echo, alternative="choose a Maven version (zabref zk versions)")
        return Distribution(version, tuple(Path(p) for p in cp.split(os.pathsep)), "debian",
                            logging_backend(tuple(Path(p) for p in cp.split(os.pathsep))))
    return fetch(version, echo)


def available() -> list[tuple[str, str, bool]]:
    """Every supported version: (version, source, ready now without a download)."""
    out = [(DEBIAN_VERSION, "debian", find_classpath() is not None)]
    out += [(v, "maven", cached(v) is not None) for v in MAVEN_VERSIONS]
    return out
