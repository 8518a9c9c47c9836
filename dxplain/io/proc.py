"""What the kernel reports about this process, read from /proc (Linux)."""

from __future__ import annotations


def peak_resident_kib() -> int | None:
    """This process's high-water mark of resident memory in KiB (VmHWM of /proc/self/status), or None where
    there is no such file (not Linux)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])  # kB
    except OSError:
        pass
    return None
