"""A child process for the SIGKILL tests of the storage layer (tests/test_storage_disk.py, test_storage_crash.py).

    python storage_child.py disk DIR           write a durable and a volatile part, print "ready", wait to be killed
    python storage_child.py setup DIR          open a Storage, reach storage_steps.BASE, sync, exit 0
    python storage_child.py step DIR GROUP     open, apply the group's steps, sync, print "done", exit 0
    python storage_child.py hold DIR GROUP     open, apply the group's steps WITHOUT sync, print "ready", wait

The disk comes from the environment, as a server's does (zabref.storage.disk_from_env: ZABREF_DISK,
ZABREF_CRASH_AT).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from storage_steps import BASE_STEPS, STEP_GROUPS  # noqa: E402

from zabref.storage import Storage, disk_from_env  # noqa: E402


def wait_forever() -> None:
    print("ready", flush=True)
    while True:
        time.sleep(60)


def main(cmd: str, data_dir: str, group: str | None = None) -> None:
    disk = disk_from_env()
    if cmd == "disk":
        f = disk.create(os.path.join(data_dir, "file"))
        disk.write(f, b"durable")
        disk.fsync(f)
        disk.fsync_dir(data_dir)
        disk.write(f, b" volatile")  # never fsynced
        g = disk.create(os.path.join(data_dir, "new"))  # its name is never made durable
        disk.write(g, b"new")
        disk.fsync(g)
        wait_forever()
    storage, _ = Storage.open(data_dir, disk=disk)
    if cmd == "setup":
        for step in BASE_STEPS:
            storage.apply(step)
        storage.sync()
        storage.close()
        return
    for step in STEP_GROUPS[group]:
        storage.apply(step)
    if cmd == "hold":
        wait_forever()
    storage.sync()
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
