"""Stale Snakemake locks after a killed run.

A Snakemake run locks its working directory (``.snakemake/locks/``); a run that is killed
(Ctrl-C twice, ``kill -9``, a closed terminal) leaves the lock behind, and the next run stops
with ``LockException``. ``make run`` calls ``python -m capgap.locks <workdir>`` first: when the
folder is locked but no Snakemake process works in it, the lock is stale and is removed with
``snakemake --unlock`` (Snakemake's own command); when one does, nothing is touched and the
exact command is printed for the user to decide.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path


def lock_files(workdir: str | Path) -> list[Path]:
    """The lock files Snakemake keeps for ``workdir`` (``.snakemake/locks/*``), sorted."""
    d = Path(workdir) / ".snakemake" / "locks"
    return sorted(p for p in d.iterdir() if p.is_file()) if d.is_dir() else []


def snakemake_running_in(workdir: str | Path) -> list[int]:
    """PIDs of Snakemake processes whose working directory is ``workdir`` (Linux ``/proc``;
    other systems: an empty list is never claimed, see ``stale``)."""
    target = Path(workdir).resolve()
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "snakemake" in cmd and "capgap.locks" not in cmd and Path(os.readlink(proc / "cwd")).resolve() == target:
                pids.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return pids


def stale(workdir: str | Path) -> bool | None:
    """True: locked and no Snakemake runs there; False: not locked, or a run holds the lock;
    None: locked, and this system cannot tell (no ``/proc``)."""
    if not lock_files(workdir):
        return False
    if not Path("/proc/self").exists():
        return None
    return not snakemake_running_in(workdir)


def main(argv: list[str] | None = None) -> int:
    """``python -m capgap.locks WORKDIR [SNAKEMAKE]``: remove a stale lock of WORKDIR (with
    ``SNAKEMAKE --unlock``, default ``snakemake`` on PATH); exit 0 unless the unlock fails."""
    args = sys.argv[1:] if argv is None else argv
    workdir = Path(args[0] if args else ".")
    smk = args[1] if len(args) > 1 else "snakemake"
    state = stale(workdir)
    if state is False:
        if lock_files(workdir):
            print(
                f"capgap: another Snakemake run is working in {workdir} (pids {snakemake_running_in(workdir)}); "
                "wait for it, or stop it and run: make run",
                file=sys.stderr,
            )
        return 0
    cmd = [smk, "--unlock", "--cores", "1", *args[2:]]
    if state is None:
        print(
            f"capgap: {workdir} is locked by a Snakemake run; if none is running (a killed run), unlock it with: "
            f"{shlex.join(cmd)}",
            file=sys.stderr,
        )
        return 0
    print(
        f"capgap: removing the stale lock a killed run left in {workdir / '.snakemake' / 'locks'} ({shlex.join(cmd)})",
        file=sys.stderr,
    )
    return subprocess.run(cmd, cwd=workdir).returncode


if __name__ == "__main__":
    sys.exit(main())
