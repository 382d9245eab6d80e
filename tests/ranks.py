"""Start the ranks of a distributed test on this machine directly, without torchrun's launcher process.

torchrun imports torch (about 2 s here) before it starts the ranks, which import it again; a test that only needs
N ranks joined by ``env://`` (every layout and numerics test) skips that first import by setting the variables
torchrun would set (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``; torch.distributed's env:// rendezvous) and starting the N processes itself. The test process
hosts the rendezvous store, as torchrun's agent does (``TORCHELASTIC_USE_AGENT_STORE``), on a port it holds from
bind to exit: a port found free and handed to rank 0 to bind later can be taken in between by another test's
ranks (two pytest-xdist workers spawn at once), whose ranks then join this job's store and pair with its ranks in
mismatched collectives (a hang). When one rank fails the others are stopped (they would wait for it in a collective). Tests of what
torchrun itself does (restarts, signals, ``plait run``) still go through it.

Each rank is forked from one server process that imported torch, its distributed packages, torch._dynamo and
plait's runtime modules (:data:`PRELOAD`) once for the
whole test session (multiprocessing's forkserver with preloaded modules): a rank starts in ~0.1 s instead of
re-importing torch (~2 s, and 4 ranks share 2 cores here). The server imports and runs nothing else (no tensor
work, no threads, OMP_NUM_THREADS=1 as every rank here), so a fork of it is the fresh interpreter a rank
would be: the rank's environment, working folder, ``sys.argv`` and output files are set, then its module runs
as ``__main__`` (runpy, as ``python -m`` does) and its exit handlers run before it exits. A call whose
environment asks for other threads, or ``PLAIT_TEST_SUBPROCESS_RANKS=1``, starts fresh interpreters instead.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import time
from typing import Any


def run_ranks(nproc: int, args: list[str], timeout: float = 600, env: dict[str, str] | None = None,
              cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python *args`` as ``nproc`` ranks; returns the first failing rank's exit code (0 when all succeed) with
    every rank's standard output and error, rank by rank."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, nproc, is_master=True, wait_for_workers=False)  # held until the ranks end
    base = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True",
                WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc))
    logs = [(tempfile.NamedTemporaryFile("w+"), tempfile.NamedTemporaryFile("w+")) for _ in range(nproc)]
    envs = [{**base, "RANK": str(r), "LOCAL_RANK": str(r)} for r in range(nproc)]
    forked = base["OMP_NUM_THREADS"] == "1" and os.environ.get("PLAIT_TEST_SUBPROCESS_RANKS") != "1"
    if forked:
        procs: list[_Rank] = [_Forked(args, env, cwd or os.getcwd(), out, err) for env, (out, err) in zip(envs, logs)]
    else:
        procs = [_Popen(subprocess.Popen([sys.executable, *args], env=env, stdout=out, stderr=err, text=True,
                                         cwd=cwd)) for env, (out, err) in zip(envs, logs)]
    deadline, code = time.monotonic() + timeout, 0
    try:
        while any(p.poll() is None for p in procs):
            failed = [p.poll() for p in procs if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                code = failed[0] if failed else -9
                break
            time.sleep(0.05)
        else:
            code = next((p.poll() for p in procs if p.poll()), 0)
    finally:
        for p in procs:
            p.kill()
    texts = []
    for out, err in logs:
        out.seek(0)
        err.seek(0)
        texts.append((out.read(), err.read()))
        out.close()
        err.close()
    return subprocess.CompletedProcess([sys.executable, *args], code, "".join(o for o, _ in texts),
                                       "".join(e for _, e in texts))


RUNTIME = ["plait.run.train", "plait.run.parallel", "plait.run.context", "plait.run.checkpoint", "plait.run.pipeline",
           "plait.run.tp2d_train", "plait.run.worker_config", "plait.plan.io", "plait.workload.catalog"]
"""What ``plait.run.worker`` imports (0.14 s of a rank's start), not the worker itself: ``python -m`` of a module
already imported would run a second copy of it, with runpy's warning on the rank's standard error. Importing
these runs no plait code beyond definitions and reads no environment variable."""
# torch._dynamo and torch.export: every rank that builds a model loads them (a weight's normal_ under the device
# context goes through torch._refs, which imports torch._dynamo): 0.6-1.3 s of each rank's start, measured by
# PYTHONPROFILEIMPORTTIME=1 on a rank of plait.run.worker; neither starts a thread when imported.
PRELOAD = ["torch", "torch.distributed", "torch.distributed.fsdp", "torch.distributed.tensor",
           "torch.distributed.tensor.parallel", "torch.distributed.checkpoint", "torch._dynamo", "torch.export",
           *RUNTIME]
_context: multiprocessing.context.ForkServerContext | None = None


def _forkserver() -> multiprocessing.context.ForkServerContext:
    """The session's fork server, started once with torch imported and one OpenMP thread per process."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
        before = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"  # read by OpenMP when torch loads it, in the server
        try:
            from multiprocessing import forkserver

            forkserver.ensure_running()
        finally:
            if before is None:
                del os.environ["OMP_NUM_THREADS"]
            else:
                os.environ["OMP_NUM_THREADS"] = before
    return _context


def _rank_main(args: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """In the forked rank: what ``python *args`` would do with this environment, folder and output files."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for path, fd in ((out, 1), (err, 2)):
        opened = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(opened, fd)
        os.close(opened)
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            sys.path.insert(0, cwd)
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
            runpy.run_path(args[0], run_name="__main__")
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()


class _Rank:
    def poll(self) -> int | None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError


class _Popen(_Rank):
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class _Forked(_Rank):
    def __init__(self, args: list[str], env: dict[str, str], cwd: str, out: Any, err: Any) -> None:
        self.proc = _forkserver().Process(target=_rank_main, args=(args, env, cwd, out.name, err.name))
        self.proc.start()

    def poll(self) -> int | None:
        return self.proc.exitcode

    def kill(self) -> None:
        if self.proc.exitcode is None:
            self.proc.kill()
        self.proc.join()
