"""Rounds to loss of every setting of a federated job's ``[plan]``, measured on its toy in one process (the ranks of
``plait run --model`` equal it: :mod:`.run`); printed as ``[[rounds_to_loss]]`` tables for the description, the
multipliers ``plait plan`` ranks by.

Run: ``python -m plait.workloads.federated.converge examples/federated-toy.toml [--rounds 200]``.

The toy has ``[run].clients`` clients, so a participation fraction selects ``max(1, round(p x clients))`` of them,
not of ``[federated].clients``: a multiplier measured here is the toy's, an assumption for a larger federation.
"""

from __future__ import annotations

import argparse
import itertools
import time
from datetime import date
from pathlib import Path

from plait.workloads.federated.model import FederatedSpec, read_federated
from plait.workloads.federated.run import rounds_to, run_config


def measure(spec: FederatedSpec, rounds: int) -> list[dict[str, object]]:
    """Each ``[plan]`` setting's rounds to ``[run].target_loss`` (``None``: not within ``rounds``)."""
    from dataclasses import replace

    import torch

    from plait.workloads.federated.toy import federate  # torch

    torch.set_num_threads(1)  # tiny matmuls: more threads only contend for the cores
    out = []
    for method, tau, p in itertools.product(spec.plan.methods, spec.plan.local_steps, spec.plan.participation):
        config = replace(run_config(spec, rounds, p), local_steps=tau)
        trace = federate(config, method)
        out.append({"method": method, "local_steps": tau, "participation": p,
                    "rounds": rounds_to(trace.losses, spec.run.target_loss), "final_loss": trace.losses[-1]})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m plait.workloads.federated.converge", description=__doc__)
    parser.add_argument("model", type=Path, help="a federated TOML")
    parser.add_argument("--rounds", type=int, default=200, help="rounds at most per setting")
    args = parser.parse_args(argv)
    spec = read_federated(args.model)
    start_cpu, start = time.process_time(), time.perf_counter()
    rows = measure(spec, args.rounds)
    command = f"python -m plait.workloads.federated.converge {args.model} --rounds {args.rounds}"
    for row in rows:
        if row["rounds"] is None:
            print(f"# {row['method']} local_steps={row['local_steps']} participation={row['participation']}: "
                  f"not at {spec.run.target_loss} within {args.rounds} rounds (final {row['final_loss']:.4f})")
            continue
        print(f"[[rounds_to_loss]]\nmethod = \"{row['method']}\"\nlocal_steps = {row['local_steps']}\n"
              f"participation = {row['participation']}\nrounds = {row['rounds']}\n"
              f"target_loss = {spec.run.target_loss}\nsource = \"measured by {command} on {date.today()} "
              f"(the toy: {spec.run.clients} clients)\"\n")
    print(f"# {len(rows)} settings in {time.perf_counter() - start:.2f} s wall, "
          f"{time.process_time() - start_cpu:.2f} s CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
