"""The process table (Linux /proc), for the tests that check a sweep leaves no process running."""
import os

PARENT, GROUP = 1, 2  # the fields of /proc/PID/stat after the state: ppid, pgrp


def live_processes(field: int, value: int) -> list[int]:
    """The live (not zombie) processes whose `field` (PARENT or GROUP) is `value`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stream:
                    fields = stream.read().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            if fields[0] != "Z" and int(fields[field]) == value:
                found.append(int(entry))
    return found
