"""Who a process is, recorded so that a later process can tell a dead holder from a live one: the host, the pid, the
pid's start time and the pid namespace (:func:`process_tags`). A commit lease
(:mod:`common.platform.lakehouse.commit_lease`),
a kept run (:mod:`common.platform.tracking.outbox`) and a RUNNING MLflow run (:mod:`common.platform.tracking.status`)
carry them; :func:`process_gone` and :func:`dead` judge them.
"""

from __future__ import annotations

from typing import Mapping, Optional


def process_tags(pid: Optional[int] = None) -> dict[str, str]:
    """Of process ``pid`` (this one by default): ``process.host``, ``process.pid``, ``process.start`` (its start, in
    clock ticks since boot, from /proc) and ``process.space`` (the boot id and the pid namespace: two containers of one
    host name share neither): what :func:`~common.platform.tracking.status.close_dead_runs` tells a dead run's process
    from a live one, or from a later process given the same pid, by. The last two are empty where there is no /proc."""
    import os
    import socket

    pid = os.getpid() if pid is None else pid
    return {
        "process.host": socket.gethostname(),
        "process.pid": str(pid),
        "process.start": _process_start(pid),
        "process.space": _pid_space(),
    }


def _pid_space() -> str:
    """``<boot id>:<pid namespace>`` of this process, or "" without /proc."""
    import os

    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        return f"{boot}:{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


def _process_start(pid: int) -> str:
    """Field 22 of ``/proc/<pid>/stat`` (the start time, in clock ticks since boot), or "" (no such process, no
    /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ")".
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def process_gone(tags: Mapping[str, str]) -> bool:
    """Whether the process that :func:`process_tags` ``tags`` name ran on this host and is certainly gone (a lease or
    lock it left is no one's)."""
    import socket

    return tags.get("process.host") == socket.gethostname() and dead(tags)


def dead(tags: Mapping[str, str]) -> bool:
    """Whether the process a run's :func:`process_tags` name is certainly gone: seen from the same boot and pid
    namespace (else it cannot be checked from here; a host without /proc records none on either side and is judged by
    the pid alone), its pid is free or another process's (a later start)."""
    import os

    space, pid = _pid_space(), tags.get("process.pid", "")
    if tags.get("process.space", "") != space or not pid.isdigit():  # another boot or namespace: not ours to judge
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process of that pid: alive, maybe not ours; never closed on a guess
        return False
    start = tags.get("process.start", "")
    return bool(start) and _process_start(int(pid)) not in ("", start)
