#!/usr/bin/env bash
# Bring a machine to the state the project needs, and do nothing when it is there already.
#
#   - java (Debian default-jre-headless) runs tla2tools.jar (TLC, SANY, PlusCal) and Spark;
#   - dot (Debian graphviz) renders state graphs and failure pictures;
#   - fusermount3 (Debian fuse3) mounts the power-cut file systems under real ZooKeeper servers;
#   - cc (Debian gcc) compiles the compiled build's C (scripts/build_compiled.py, mypyc);
#   - Debian's zookeeper (3.8.0) is the real-ZooKeeper checks' default version (others come from Maven Central);
#   - .venv: a virtual environment made with the machine's python3 (>= 3.11), holding
#     `pip install -e '.[dev]'`. It is reinstalled only when pyproject.toml (or the checkout's
#     location) changed since the last install: .venv/.bootstrap-stamp keeps the hash.
#
# Works as root (apt-get directly), as a user with sudo, on a fresh Debian machine, and in CI
# (CI=true, no stdin: nothing here ever prompts). Prints nothing when there is nothing to do.
# Environment: PYTHON=/path/to/python3.x picks the interpreter for a new venv.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd -P)
VENV="$ROOT/.venv"
STAMP="$VENV/.bootstrap-stamp"

say() { echo "bootstrap: $*" >&2; }
die() { echo "bootstrap: error: $*" >&2; exit 1; }

# --- system packages -------------------------------------------------------------------------
APT_UPDATED=0
apt_install() {
    # apt_install PACKAGE... -- installs Debian packages, running `apt-get update` once first.
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            die "need to install $* but am not root and cannot use sudo without a password; install them by hand"
        fi
    fi
    command -v apt-get >/dev/null 2>&1 || die "need to install $* but apt-get is missing; install them by hand"
    export DEBIAN_FRONTEND=noninteractive
    local log
    log=$(mktemp)
    if [ "$APT_UPDATED" -eq 0 ]; then
        "${sudo[@]}" apt-get update -qq </dev/null >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "apt-get update failed"; }
        APT_UPDATED=1
    fi
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" </dev/null >"$log" 2>&1 \
        || { tail -n 20 "$log" >&2; rm -f "$log"; die "apt-get install $* failed"; }
    rm -f "$log"
}

if ! command -v java >/dev/null 2>&1 && ! [ -x "${JAVA_HOME:-/nonexistent}/bin/java" ]; then
    say "java is missing: installing default-jre-headless"
    apt_install default-jre-headless
    command -v java >/dev/null 2>&1 || die "java is still not on PATH after installing default-jre-headless"
fi
if ! command -v dot >/dev/null 2>&1; then
    say "dot is missing: installing graphviz"
    apt_install graphviz
    command -v dot >/dev/null 2>&1 || die "dot is still not on PATH after installing graphviz"
fi

if ! command -v fusermount3 >/dev/null 2>&1; then
    # the power cut under real ZooKeeper servers (conformance/zk/powercut.py) mounts FUSE file systems
    say "fusermount3 is missing: installing fuse3"
    apt_install fuse3
    command -v fusermount3 >/dev/null 2>&1 || die "fusermount3 is still not on PATH after installing fuse3"
fi

if ! command -v cc >/dev/null 2>&1; then
    # the compiled build (scripts/build_compiled.py): mypyc writes C, which cc compiles
    say "cc is missing: installing gcc"
    apt_install gcc
    command -v cc >/dev/null 2>&1 || die "cc is still not on PATH after installing gcc"
fi

if ! [ -f /usr/share/java/zookeeper.jar ]; then
    # Debian's ZooKeeper 3.8.0, the real-ZooKeeper checks' default version (conformance/zk/versions.py): the tests
    # that run it skip where it is missing, and the fault tests install it on the fly, so on a fresh machine which of
    # them ran depended on the order the workers took the files in. Installed here, every one of them runs.
    say "Debian's zookeeper (3.8.0) is missing: installing it"
    apt_install zookeeper
    [ -f /usr/share/java/zookeeper.jar ] || die "zookeeper.jar is still missing after installing zookeeper"
fi

# --- Python interpreter ----------------------------------------------------------------------
python_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }

pick_python() {
    if [ -n "${PYTHON:-}" ]; then
        python_ok "$PYTHON" || die "PYTHON=$PYTHON is not a Python >= 3.11"
        echo "$PYTHON"; return
    fi
    local candidate
    for candidate in python3 python3.13 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
            echo "$candidate"; return
        fi
    done
    local found="none"
    command -v python3 >/dev/null 2>&1 && found=$(python3 -c 'import sys; print(sys.version.split()[0])')
    die "zabref needs Python >= 3.11 (python3 here is: $found); install one, or set PYTHON=/path/to/python3.x"
}

# --- virtual environment ---------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ] || ! python_ok "$VENV/bin/python"; then
    PY=$(pick_python)
    say "creating .venv with $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
    rm -rf "$VENV"
    if ! "$PY" -m venv "$VENV" >/dev/null 2>&1; then
        # Debian's python3 ships venv's ensurepip separately.
        say "python3 -m venv failed: installing python3-venv"
        apt_install python3-venv
        rm -rf "$VENV"
        "$PY" -m venv "$VENV" || die "cannot create a virtual environment with $PY"
    fi
fi

# The stamp covers what the install depends on: the project's metadata and where the checkout
# lives (an editable install points at one path).
want=$( { cat pyproject.toml; echo "$ROOT"; "$VENV/bin/python" -c 'import sys; print(sys.version)'; } \
        | sha256sum | cut -d' ' -f1)
have=$(cat "$STAMP" 2>/dev/null || true)
if [ "$want" != "$have" ]; then
    if [ -z "$have" ]; then why="first install"; else why="pyproject.toml changed since the last install"; fi
    say "installing zabref and its dependencies into .venv ($why)"
    log=$(mktemp)
    if ! "$VENV/bin/python" -m pip install --no-input --disable-pip-version-check -q -e ".[dev]" >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        rm -f "$log"
        die "pip install -e '.[dev]' failed (last lines above)"
    fi
    rm -f "$log"
    echo "$want" >"$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
fi
