"""Start the ranks of a distributed test on this machine directly, without torchrun's launcher process.

torchrun imports torch (about 2 s here) before it starts the ranks, which import it again; a test that only needs
N ranks joined by ``env://`` (every layout and numerics test) skips that first import by setting the variables
torchrun would set (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``; torch.distributed's env:// rendezvous, rank 0 hosting the store) and starting the N processes
itself. When one rank fails the others are stopped (they would wait for it in a collective). Tests of what
torchrun itself does (restarts, signals, ``plait run``) still go through it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(nproc: int, args: list[str], timeout: float = 600, env: dict[str, str] | None = None,
              cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python *args`` as ``nproc`` ranks; returns the first failing rank's exit code (0 when all succeed) with
    every rank's standard output and error, rank by rank."""
    base = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(nproc),
                LOCAL_WORLD_SIZE=str(nproc))
    logs = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in range(nproc)]
    procs = [subprocess.Popen([sys.executable, *args], env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=out, stderr=err, text=True, cwd=cwd) for r, (out, err) in enumerate(logs)]
    deadline, code = time.monotonic() + timeout, 0
    try:
        while any(p.poll() is None for p in procs):
            failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                code = failed[0] if failed else -9
                break
            time.sleep(0.05)
        else:
            code = next((p.returncode for p in procs if p.returncode), 0)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    texts = []
    for out, err in logs:
        out.seek(0)
        err.seek(0)
        texts.append((out.read(), err.read()))
        out.close()
        err.close()
    return subprocess.CompletedProcess([sys.executable, *args], code, "".join(o for o, _ in texts),
                                       "".join(e for _, e in texts))
