"""The federated toy: an MLP (shared body, personal head) on synthetic non-iid data, and one round of PFLEGO and of
FedAvg as pure functions a client and the server call; :func:`federate` runs the whole federation in one process (the
reference the ranks of :mod:`.worker` must equal).

- PFLEGO (arXiv 2202.09848, abstract; the authors' code, sotirisnik/PFLEGO ``main.py``): a selected client takes
  ``tau - 1`` full-batch gradient steps on its head only (the body's features computed once: the body is fixed), then
  one joint step: it updates its head (by the server's step times ``I / r``) and returns the body's gradient; the
  server steps the body by ``(I / r) sum_{i in S} alpha_i grad_i`` (``alpha_i = N_i / N``): with every client
  selected, the gradient of the clients' objective ``sum_i alpha_i l_i(theta, W_i)``; unbiased over the uniform
  selection of ``r`` of the ``I`` clients otherwise. (The authors' code normalizes ``alpha_i`` over the selected
  clients and then scales by ``I / r``: the same direction, ``I / r`` times longer with equal ``N_i``.)
- FedAvg (arXiv 1602.05629, Algorithm 1): a selected client takes ``tau`` full-batch gradient steps on the whole model
  from the server's weights and returns them; the server averages them weighted by ``n_k``.

Data: client ``i`` holds samples of two of the ``C`` classes (``i mod C`` and ``i + 1 mod C``: label skew), each
around its class mean (``2 / sqrt(F)`` x a standard normal: classes overlap at any width) plus the client's own
shift of the inputs (feature skew).

Tensor legend: ``N`` samples of a client, ``F`` inputs, ``H`` a hidden width, ``C`` classes, ``P`` body values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as fn

from plait.workloads.federated.config import FederatedRunConfig

Layers = list[tuple[torch.Tensor, torch.Tensor]]
"""Linear maps as (weight ``[out, in]``, bias ``[out]``)."""


def client_data(config: FederatedRunConfig, client: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Client ``client``'s samples ``(x_NF, y_N)`` (module docstring)."""
    scale = 2.0 / math.sqrt(config.inputs)  # class means ~2 apart at any width: overlapping classes
    means_CF = scale * torch.randn(config.classes, config.inputs, generator=torch.Generator().manual_seed(config.seed))
    g = torch.Generator().manual_seed(config.seed * 1000 + client + 1)
    shift_F = 0.7 * scale * torch.randn(config.inputs, generator=g)
    y_N = (client + torch.randint(0, 2, (config.samples,), generator=g)) % config.classes
    x_NF = means_CF[y_N] + torch.randn(config.samples, config.inputs, generator=g) + shift_F
    return x_NF, y_N


def _linear(fan_in: int, fan_out: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(fan_out, fan_in, generator=g) / math.sqrt(fan_in), torch.zeros(fan_out)


def init_body(config: FederatedRunConfig) -> Layers:
    """The shared body's initial weights (seeded: the same on every rank)."""
    g, widths = torch.Generator().manual_seed(config.seed + 7), (config.inputs, *config.body)
    return [_linear(a, b, g) for a, b in zip(widths, widths[1:])]


def init_head(config: FederatedRunConfig, client: int) -> Layers:
    """A head's initial weights: client ``client``'s in PFLEGO, the shared one (``client = -1``) in FedAvg."""
    return [_linear(config.body[-1], config.classes, torch.Generator().manual_seed(config.seed + 100 + client))]


def features(body: Layers, x_NF: torch.Tensor) -> torch.Tensor:
    """The body's output ``h_NH`` (linear maps, each followed by a ReLU)."""
    h = x_NF
    for w, b in body:
        h = torch.relu(h @ w.T + b)
    return h


def loss(body: Layers, head: Layers, x_NF: torch.Tensor, y_N: torch.Tensor) -> torch.Tensor:
    """A client's mean cross-entropy ``l_i``."""
    (w, b), = head
    return fn.cross_entropy(features(body, x_NF) @ w.T + b, y_N)


def flat(layers: Layers) -> torch.Tensor:
    """The layers' values as one vector (the order of :func:`unflat`)."""
    return torch.cat([t.reshape(-1) for pair in layers for t in pair])


def unflat(vector: torch.Tensor, like: Layers) -> Layers:
    """``vector`` cut into ``like``'s shapes."""
    out, at = [], 0
    for w, b in like:
        pair = []
        for t in (w, b):
            pair.append(vector[at:at + t.numel()].reshape(t.shape).clone())
            at += t.numel()
        out.append((pair[0], pair[1]))
    return out


def _grads(value: torch.Tensor, layers: Layers) -> Layers:
    got = torch.autograd.grad(value, [t for pair in layers for t in pair])
    return [(got[2 * i], got[2 * i + 1]) for i in range(len(layers))]


def _leaf(layers: Layers) -> Layers:
    return [(w.detach().requires_grad_(), b.detach().requires_grad_()) for w, b in layers]


def _step(layers: Layers, grads: Layers, lr: float) -> Layers:
    return [(w.detach() - lr * gw, b.detach() - lr * gb) for (w, b), (gw, gb) in zip(layers, grads)]


def pflego_client(body: Layers, head: Layers, data: tuple[torch.Tensor, torch.Tensor], local_steps: int,
                  head_lr: float, joint_lr: float) -> tuple[torch.Tensor, Layers, Layers]:
    """One selected client's PFLEGO round: (the body's gradient ``g_P``, its new head, the head its joint step
    differentiated at). The head steps take ``head_lr``; the joint step's head update ``joint_lr``, the server's step
    scaled by ``I / r`` as the authors' code scales it (sotirisnik/PFLEGO ``main.py``: ``server_lr * num_clients /
    C``), so that with the server's body step it is one SGD step over all the weights."""
    x_NF, y_N = data
    h_NH = features(body, x_NF).detach()  # the body is fixed for the head steps: its features once
    for _ in range(local_steps - 1):
        head = _leaf(head)
        (w, b), = head
        head = _step(head, _grads(fn.cross_entropy(h_NH @ w.T + b, y_N), head), head_lr)
    at, body_leaf, head_leaf = head, _leaf(body), _leaf(head)
    grads = _grads(loss(body_leaf, head_leaf, x_NF, y_N), body_leaf + head_leaf)
    return flat(grads[:len(body)]).detach(), _step(head, grads[len(body):], joint_lr), at


def pflego_server(body: Layers, grads: list[torch.Tensor], clients: int, lr: float) -> tuple[Layers, torch.Tensor]:
    """The server's exact SGD step from the selected clients' body gradients (equal ``N_i``: ``alpha_i = 1 / I``, so
    ``(I / r) sum alpha_i g_i`` is their mean); returns the new body and the gradient applied ``g_P``."""
    applied = (clients / len(grads)) * sum(g / clients for g in grads)
    return unflat(flat(body) - lr * applied, body), applied


def fedavg_client(model: Layers, data: tuple[torch.Tensor, torch.Tensor], local_steps: int,
                  lr: float) -> torch.Tensor:
    """One selected client's FedAvg round from the server's ``model`` (body and head): its weights after
    ``local_steps`` full-batch steps, as one vector."""
    x_NF, y_N = data
    for _ in range(local_steps):
        model = _leaf(model)
        model = _step(model, _grads(loss(model[:-1], model[-1:], x_NF, y_N), model), lr)
    return flat(model)


def fedavg_server(model: Layers, weights: list[torch.Tensor]) -> Layers:
    """The selected clients' weights averaged (equal ``n_k``: their mean)."""
    return unflat(sum(weights) / len(weights), model)


def selected(config: FederatedRunConfig, round_index: int) -> list[int]:
    """The clients (0-based) the server selects in a round: ``max(1, round(participation x clients))`` of them,
    uniformly at random (seeded: every rank draws the same)."""
    count = max(1, round(config.participation * config.clients))
    g = torch.Generator().manual_seed(config.seed * 7919 + round_index)
    return sorted(torch.randperm(config.clients, generator=g)[:count].tolist())


@dataclass
class Trace:
    """What a federation measured per round."""

    losses: list[float]
    """The clients' objective ``sum_i alpha_i l_i`` at each round's start, and after the last."""
    applied: list[list[float]]
    """PFLEGO: the gradient the server applied in each round."""
    full: list[list[float]]
    """PFLEGO: the gradient of the clients' objective at each round's weights (every client's head where its joint
    step took it), by autograd over the whole objective in one graph."""


def objective(body: Layers, heads: list[Layers], data: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """``sum_i alpha_i l_i(theta, W_i)`` (equal ``N_i``)."""
    return sum(loss(body, head, x, y) for head, (x, y) in zip(heads, data)) / len(data)  # type: ignore[return-value]


def federate(config: FederatedRunConfig, method: str) -> Trace:
    """The whole federation in one process (module docstring)."""
    data = [client_data(config, i) for i in range(config.clients)]
    body = init_body(config)
    heads = [init_head(config, i if method == "pflego" else -1) for i in range(config.clients)]
    trace = Trace(losses=[], applied=[], full=[])
    for r in range(config.rounds):
        with torch.no_grad():
            trace.losses.append(float(objective(body, heads, data)))
        chosen = selected(config, r)
        if method == "pflego":
            joint_lr = config.lr * config.clients / len(chosen)
            results = {i: pflego_client(body, heads[i], data[i], config.local_steps, config.head_lr, joint_lr)
                       for i in chosen}
            at = [results[i][2] if i in results else heads[i] for i in range(config.clients)]
            leaf = _leaf(body)
            trace.full.append(flat(_grads(objective(leaf, at, data), leaf)).tolist())
            body, applied = pflego_server(body, [results[i][0] for i in chosen], config.clients, config.lr)
            trace.applied.append(applied.tolist())
            heads = [results[i][1] if i in results else heads[i] for i in range(config.clients)]
        else:
            model = body + heads[0]
            model = fedavg_server(model, [fedavg_client(model, data[i], config.local_steps, config.lr)
                                          for i in chosen])
            body, heads = model[:-1], [model[-1:]] * config.clients
    with torch.no_grad():
        trace.losses.append(float(objective(body, heads, data)))
    return trace
