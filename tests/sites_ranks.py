"""One rank of tests/test_sites_runtime.py: the hierarchical all-reduce of plait.run.sites on 4 ranks laid out as
two sites of 2, against the sum computed here from every rank's known input."""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from plait.run.sites import Reducer, SiteReducer, build_reducer
from tests.site_topk_ranks import site_topk_found


def _inputs(rank: int, numel: int) -> torch.Tensor:
    return torch.arange(numel, dtype=torch.float32) * (rank + 1) + rank


def main() -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    found: dict[str, object] = {}
    whole = build_reducer(dist.group.WORLD, site_gpus=2)  # type: ignore[arg-type]
    found["world"] = [type(whole).__name__, dist.get_process_group_ranks(whole.inside),
                      dist.get_process_group_ranks(whole.across)] if isinstance(whole, SiteReducer) else None
    for numel in (7, 8):  # 7: padded to a multiple of the 2 ranks in a site
        x = _inputs(rank, numel)
        whole.all_reduce(x).wait()
        found[f"sum{numel}"] = bool(torch.equal(x, sum(_inputs(r, numel) for r in range(world))))
    pending = [whole.all_reduce(torch.full((5,), float(i))) for i in range(3)]  # started together, in order
    found["ordered"] = [fut.wait()[0].tolist() for fut in pending]
    strided, _ = dist.new_subgroups_by_enumeration([[0, 2], [1, 3]])  # TP=2: replicas 2 ranks apart, one per site
    apart = build_reducer(strided, site_gpus=2)
    x = _inputs(rank, 3)
    apart.all_reduce(x).wait()
    peers = dist.get_process_group_ranks(strided)
    found["strided"] = [type(apart).__name__, bool(torch.equal(x, sum(_inputs(r, 3) for r in peers)))]
    found["uneven"] = type(build_reducer(dist.group.WORLD, site_gpus=3)).__name__  # 3 + 1: flat
    found["one_site"] = type(build_reducer(dist.group.WORLD, site_gpus=4)).__name__
    found["none"] = type(build_reducer(dist.group.WORLD, site_gpus=None)).__name__ == Reducer.__name__  # type: ignore[arg-type]
    found["site_topk"] = site_topk_found(rank)
    print(json.dumps({"rank": rank, **found}))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
