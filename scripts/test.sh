#!/usr/bin/env bash
# The test suite: bring the machine up to date, then run pytest with any arguments given, on three workers
# (pytest-xdist), each test file on one worker so that a file's fixtures are made once. Three on the machine's two
# cores, because a worker often waits (on servers, on TLC, on another worker generating the traces it needs): two
# workers kept the cores 58 % busy. Three took 18:26 on a fresh clone (2026-11-26); two had taken 19:56 on the commit
# before (ten more simulation seeds validated, and a job at the lowest priority beside it). Generated
# traces are shared through conformance/graph/cache.py's lock. ZABREF_TEST_WORKERS=N (or `-n N` as an argument) sets
# the number of workers; 0 runs the suite in one process.
#   bash scripts/test.sh                          # everything but the tests marked deep or long
#   bash scripts/test.sh --deep                   # and the deep ones: what CI runs (.ci/run)
#   bash scripts/test.sh tests/test_toolchain.py -q
#   bash scripts/test.sh --build compiled tests/test_core.py   # on the compiled build (scripts/build_compiled.py)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
if [ "${1:-}" = "--build" ]; then
    # The compiled build runs when its folder is first on every process's import path: PYTHONPATH, and
    # PYTHONSAFEPATH so that `python -m` does not put this checkout first; tests/conftest.py checks it took.
    if [ "${2:-}" != "compiled" ]; then
        echo "test.sh: --build takes 'compiled' (the pure build is the default)" >&2
        exit 2
    fi
    PYTHONPATH="$(.venv/bin/python scripts/build_compiled.py)"
    export PYTHONPATH PYTHONSAFEPATH=1 ZABREF_EXPECT_BUILD=compiled
    echo "test.sh: the compiled build in $PYTHONPATH"
    shift 2
fi
rc=0
start=$SECONDS
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }  # busy and total jiffies
read -r busy0 total0 < <(busy)
# The watchdog: a suite still running after ZABREF_TEST_DEADLINE seconds (0: no limit) is hung, not slow (CI gives
# the whole job 90 minutes; a fresh clone's --deep run took 32-47). It prints every process of this script still
# running and the Python stacks of the suite's own (py-spy), then stops them, so the log says where it hung and the
# job ends. It runs in the background and pytest in the foreground, so that Ctrl-C still reaches pytest.
descendants() {  # every process below $1 but $2 (the watchdog), depth first
    local child
    for child in $(pgrep -P "$1"); do
        if [ "$child" != "$2" ]; then echo "$child"; descendants "$child" "$2"; fi
    done
}
stuck() {  # $1: this script's shell, $2: the watchdog
    echo "test.sh: pytest still running after ${deadline}s: what runs, then the suite's Python stacks" >&2
    local below
    below=$(descendants "$1" "$2" | paste -sd, -)
    [ -n "$below" ] && { ps -o pid,ppid,etimes,pcpu,rss,args --forest -p "$below" | cut -c1-220 >&2 || true; }
    for pid in $(descendants "$1" "$2"); do
        if grep -qa 'pytest\|sys.stdin.readline' "/proc/$pid/cmdline" 2>/dev/null && [ -x .venv/bin/py-spy ]; then
            .venv/bin/py-spy dump --pid "$pid" >&2 || true
        fi
    done
    # shellcheck disable=SC2046
    kill -KILL $(descendants "$1" "$2") 2>/dev/null || true
}
deadline=${ZABREF_TEST_DEADLINE:-5000}
watchdog=
if [ "$deadline" -gt 0 ]; then
    (
        trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
        sleep "$deadline" </dev/null >/dev/null 2>&1 &
        sleeper=$!
        wait "$sleeper" || exit 0
        stuck "$$" "$BASHPID"
    ) &
    watchdog=$!
fi
# --max-worker-restart=0: a worker that dies (a segfault, an os._exit) ends the session with its test named, because
# pytest-xdist 3.8's loadfile scheduler puts a dead worker's finished files back in its queue as empty units and then
# waits for them forever (pytest-xdist issues 1313 and 1378); pytest-timeout's "signal" method (pyproject.toml) keeps
# a test past its bound from killing its worker at all.
.venv/bin/python -m pytest -n "${ZABREF_TEST_WORKERS:-3}" --dist loadfile --max-worker-restart=0 --durations=10 \
    "$@" || rc=$?
if [ -n "$watchdog" ]; then kill "$watchdog" 2>/dev/null || true; wait "$watchdog" 2>/dev/null || true; fi
# The suite's cost, so that growth shows in every CI log: wall, and the CPU of everything it ran and waited for
# (this shell's children: pytest, its workers and what they waited for; /proc/PID/stat's cutime and cstime; a
# process nobody waits for, such as a Spark JVM ended at exit, is not in it).
read -r -a stat </proc/$$/stat
cpu=$(( (stat[15] + stat[16]) / $(getconf CLK_TCK) ))
wall=$(( SECONDS - start ))
# and how busy the machine's cores were meanwhile (/proc/stat: anything else running counts too)
read -r busy1 total1 < <(busy)
cores=$(nproc)
echo "test.sh: wall ${wall}s, CPU ${cpu}s ($(( wall > 0 ? 100 * cpu / wall : 0 ))% of one core); the machine's" \
     "${cores} cores were $(( total1 > total0 ? 100 * cores * (busy1 - busy0) / (total1 - total0) : 0 ))% busy"
if [ "$rc" -eq 5 ]; then
    # pytest's "no tests were collected" is a broken selection, not a pass.
    echo "test.sh: pytest collected no tests (exit 5): treating as a failure" >&2
    exit 1
fi
exit "$rc"
