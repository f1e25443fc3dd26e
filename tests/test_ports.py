"""Port leases: a block one process holds is never handed to another until released (or its holder dies)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from zabref.errors import ZabError
from zabref.net.ports import find_free_base_port, release_base_port

# A range with exactly one possible base for 3 servers: randrange(LOW, HIGH - 30) // 10 * 10 == LOW. It lies below
# find_free_base_port's default range (10000..32000), which every other caller leases from: a block some earlier
# test of this pytest process leased there (leases last until release or exit) made these tests fail at random.
LOW, HIGH = 9450, 9485


def _holder() -> subprocess.Popen[str]:
    code = textwrap.dedent(f"""
        import sys
        from zabref.net.ports import find_free_base_port
        print(find_free_base_port(3, low={LOW}, high={HIGH}, tries=5), flush=True)
        sys.stdin.read()  # hold the lease until the parent closes our stdin
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_a_block_leased_by_another_process_is_not_handed_out_until_it_exits() -> None:
    holder = _holder()
    try:
        assert holder.stdout.readline().strip() == str(LOW)
        with pytest.raises(ZabError, match="no 30 free consecutive ports"):
            find_free_base_port(3, low=LOW, high=HIGH, tries=5)
    finally:
        holder.stdin.close()
        holder.wait(10)
    base = find_free_base_port(3, low=LOW, high=HIGH, tries=5)  # the kernel dropped the dead holder's locks
    assert base == LOW
    release_base_port(base)


def test_release_makes_the_block_available_again_and_is_idempotent() -> None:
    base = find_free_base_port(2, low=LOW, high=LOW + 25, tries=5)
    release_base_port(base)
    release_base_port(base)
    assert find_free_base_port(2, low=LOW, high=LOW + 25, tries=5) == base
    release_base_port(base)


def test_ports_some_other_program_holds_are_skipped() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", LOW + 12))
        with pytest.raises(ZabError):
            find_free_base_port(3, low=LOW, high=HIGH, tries=5)
