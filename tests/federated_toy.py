"""A tiny federation for the tests: 10 clients of a 2 -> 3 -> 2 MLP on T4s behind a 100/200 B/s link (hand counts
in tests/test_federated.py), with the fields the tests vary as arguments."""

from __future__ import annotations

FIG = 'source = "assumed: a test"'


def tiny_federation(participation: float, sigma: float, plan_steps: str, plan_participation: str,
                    run: str = "") -> str:
    """The TOML text; ``plan_*`` are TOML lists, ``run`` the ``[run]`` table's body (none when empty)."""
    text = f"""
[federated]
method = "pflego"
clients = 10
participation = {participation}
local_steps = 3
samples_per_client = 4
batch = 4
[model]
inputs = 2
body = [3]
classes = 2
[client]
accelerator = "t4"
dtype = "fp32"
efficiency = {{ value = 0.5, {FIG} }}
[client.link]
uplink_bytes_per_s = {{ value = 100.0, {FIG} }}
downlink_bytes_per_s = {{ value = 200.0, {FIG} }}
latency_s = {{ value = 0.01, {FIG} }}
[stragglers]
sigma = {{ value = {sigma}, {FIG} }}
[plan]
local_steps = {plan_steps}
participation = {plan_participation}
"""
    return text + (f"[run]\n{run}\n" if run else "")
