"""A server of one accelerator described from its datasheet alone: for a run that names its GPU but not the system
it ran on (a measured table of "8x L20" or "1x T4"), so that it can still be predicted, with what is assumed said.

- :func:`accelerator_slug` reads a GPU as tables write it (``NVIDIA A100-SXM4-80GB``, ``Tesla V100 32GB``, ``L20``,
  ``RTX 3090``, ``H100``) as a packaged accelerator: the vendor's words dropped, the form factor (SXM, PCIe) and the
  memory kept where the catalog has that variant; a family named alone is its most common part (:data:`FAMILIES`).
- :func:`gpu_server` is one server of :data:`SERVER_GPUS` of them, joined by the accelerator's own scale-up link
  (NVLink, Infinity Fabric, or PCIe where it has none) at the efficiency and latency the packaged presets assume for
  that kind of link. A run that spans servers is refused: the network between them is not in any datasheet.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from typing import Any

from plait.errors import ConfigError
from plait.hardware.catalog import accelerator_names, cluster_from_mapping, get_accelerator
from plait.hardware.cluster import Cluster

SERVER_GPUS = 8
"""GPUs of one server (assumed: the 8-GPU baseboard of NVIDIA's HGX/DGX and AMD's OAM platforms, and the 8-card
PCIe servers the packaged PCIe presets describe)."""
FAMILIES = {"a100": "a100-80gb", "h100": "h100-sxm-80gb", "h100-80gb": "h100-sxm-80gb", "a800": "a800-80gb",
            "h100-nvl": "h100-94gb"}
"""A family or part named without the variant the catalog needs -> the packaged part (assumed: the variant of the
family's reference system, ``plait.validate.translate.REFERENCE_SYSTEM``; the H100 NVL card is the catalog's 94 GB
part). The H100 PCIe card (80 GB, lower clocks) has no entry: it is not the NVL card, and no part is guessed."""
VENDOR_WORDS = ("nvidia", "tesla", "geforce", "quadro", "amd", "instinct", "radeon")
FORM_FACTORS = re.compile(r"^(sxm\d?|hgx|dgx|oam|h|hbm\d?e?|gddr\d?x?)$")
"""Tokens of a GPU name that say its package or memory type, not its part (``-H``: DGX-2H's higher-clocked V100;
``HBM3``: as ``nvidia-smi`` names an H100 SXM, ``NVIDIA H100 80GB HBM3``)."""
MEMORY = re.compile(r"^(\d+)gb$")
LINK_EFFICIENCY = {"pcie": (0.75, 6.0), "nvlink": (0.8, 3.0), "xgmi": (0.8, 3.0)}
"""Scale-up link kind -> (sustained fraction of its line rate, latency of one step in us), as the packaged presets
assume them (clusters.toml): PCIe ~0.75 of the line rate with a 6 us hop through the host (aws-p2-8xlarge,
aws-g5-24xlarge); NVLink and Infinity Fabric ~0.8 at 3 us (the ring busbw plateau of ~370 of 450 GB/s on 8 H100,
nccl-tests issue #212, of dgx-h100-ib's measured curve; latency NCCL tuning.cc, as there)."""


def accelerator_slug(name: str) -> str | None:
    """The packaged accelerator a GPU name means (module docstring), or ``None``."""
    known = set(accelerator_names())
    words = re.split(r"[\s_/]+|-", name.strip().lower())
    words = [w for w in words if w and w not in VENDOR_WORDS]
    if not words:
        return None
    joined = "-".join(words)
    if joined in known:
        return joined
    memory = next((w for w in words if MEMORY.match(w)), "")
    pcie = "pcie" in words
    part = [w for w in words if not FORM_FACTORS.match(w) and w != "pcie" and w != memory]
    # a part split in two ("rtx 3090") is one word in the catalog
    for base in dict.fromkeys(("-".join(part), "".join(part))):
        for slug in (f"{base}-pcie" if pcie else "", f"{base}-{memory}" if memory else "", base):
            slug = FAMILIES.get(slug, slug)
            if slug in known and (not pcie or slug.endswith("-pcie") or _pcie_card(slug)):
                return slug
    return None


def _pcie_card(slug: str) -> bool:
    """Whether the packaged part is a PCIe card (no scale-up link of its own), so that a name saying PCIe means it."""
    return get_accelerator(slug).scale_up_link.lower().startswith("none")


def stated_memory_gib(name: str) -> float | None:
    """The memory a GPU name states (``V100-SXM2-16GB``: 16), or ``None``."""
    found = next((MEMORY.match(w) for w in re.split(r"[\s_/-]+", name.lower()) if MEMORY.match(w)), None)
    return float(found.group(1)) if found else None


def gpu_server(name: str, gpus: int) -> Cluster:
    """One server of :data:`SERVER_GPUS` GPUs named ``name`` (module docstring), ``gpus`` of them used; the memory
    the name states replaces the packaged part's where the catalog has no such variant (a V100 16GB as the 32GB
    part with 16 GB)."""
    slug = accelerator_slug(name)
    if slug is None:
        raise ConfigError(f"GPU {name!r}: no packaged accelerator of that name "
                          f"(known: {', '.join(accelerator_names())})")
    if gpus > SERVER_GPUS:
        raise ConfigError(f"GPU {name!r}: {gpus} GPUs span servers, and no description of the network between them "
                          f"was given (a generic server holds {SERVER_GPUS})")
    return _server(name, slug)


@functools.cache
def _server(name: str, slug: str) -> Cluster:
    """:func:`gpu_server`'s cluster, built once per name (its collective times are kept on it)."""
    acc = get_accelerator(slug)
    described = acc.scale_up_link.lower()
    link = "pcie" if described.startswith("none") else "xgmi" if "infinity fabric" in described else "nvlink"
    efficiency, latency_us = LINK_EFFICIENCY[link]
    raw: dict[str, Any] = {
        "name": f"a server of {SERVER_GPUS} {acc.name} (generic: the system is not named)",
        "accelerator": slug,
        "gpus_per_node": SERVER_GPUS,
        "scale_up_domain_gpus": SERVER_GPUS,
        "price_per_gpu_hour_usd": 1.0,
        "price_source": "assumed: no price is known for a server described from its GPU alone",
        "host_memory_gib_per_gpu": 128.0,
        "host_memory_bandwidth_gb_per_s_per_gpu": 51.2,
        "host_memory_bandwidth_source": "assumed: a dual-socket host of 8 DDR4-3200 channels per socket (2 x 204.8 "
                                        "GB/s) over 8 GPUs, as the packaged l40-pcie server; the host is not named",
        "source": f"accelerators.toml {slug} (its datasheet); the server around it assumed (plait.hardware.server)",
        "note": f"Generic server: {SERVER_GPUS} GPUs on the part's {acc.scale_up_link} at "
                f"{acc.scale_up_bandwidth_gb_per_s:g} GB/s per direction; host cores not stated.",
        "tiers": [{
            "name": link,
            "span_gpus": SERVER_GPUS,
            "bandwidth_gb_per_s_per_gpu": acc.scale_up_bandwidth_gb_per_s,
            "latency_us": latency_us,
            "efficiency": {"value": efficiency, "source": "assumed: as the packaged presets' links of this kind "
                                                          "(plait.hardware.server.LINK_EFFICIENCY)"},
            "source": f"accelerators.toml {slug} scale_up_bandwidth_gb_per_s",
        }],
    }
    cluster = cluster_from_mapping(raw, f"generic server of {name!r}")
    memory = stated_memory_gib(name)
    if memory is not None and memory != acc.memory_gib and not slug.endswith(f"-{memory:g}gb"):
        cluster = replace(cluster, accelerator=replace(cluster.accelerator, memory_gib=memory))
    return cluster


def server_problem(name: str, gpus: int) -> str | None:
    """Why :func:`gpu_server` cannot describe ``gpus`` GPUs named ``name`` (in a few words), or ``None``."""
    if accelerator_slug(name) is None:
        return f"no preset system of {name} GPUs, and no packaged accelerator of that name"
    if gpus > SERVER_GPUS:
        return f"no preset system of {name} GPUs, and {gpus} of them span servers of a network not described"
    return None
