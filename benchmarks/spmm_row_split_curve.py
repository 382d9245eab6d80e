"""The rate of the row-split CSR SpMM kernel (torch_sparse's ``spmm_kernel``) by the sparse matrix's mean row length:
the ``torch_sparse_spmm_relative`` curve of ``plait/hardware/data/kernels.toml``, derived from the published
per-matrix timings of the kernel's paper.

Source: Yang, Buluc and Owens, "Design Principles for Sparse Matrix Multiplication on the GPU", Euro-Par 2018; its
artifact https://github.com/owensgroup/merge-spmm (``result/Figure6_row.txt`` at commit 6ffe5ae): each SuiteSparse
matrix's rows, non-zeros and mean row length, and the time of cuSPARSE csrmm, csrmm2 and the paper's row-split kernel
multiplying it by a dense matrix of 64 fp32 columns (``gflops = 2 nnz 64 / time``) on a Tesla K40c (paper Sec. 5.1:
"an NVIDIA K40c GPU with 12GB on-board memory", CUDA 8.0). torch_sparse's kernel is that row split (csrc/cuda/
spmm_cuda.cu: "Paper: Design Principles for Sparse Matrix Multiplication on the GPU"; one warp per row, its 32 lanes
over 32 columns).

The rate is counted as plait counts a fused product (:func:`plait.workloads.gnn.compute.aggregation_values`): each
non-zero's input row read once and each output row written once, ``(nnz + rows) 64`` fp32 values, over the time and
the K40c's datasheet bandwidth (288 GB/s: NVIDIA Tesla K40 board specification BD-06902-001). Printed: the median
mean row length and the median rate of the matrices in each power-of-two class of mean row length, and the time a
row takes at that rate in units of the time to stream one 64-wide row (``(length + 1) / rate``).

Run: git clone https://github.com/owensgroup/merge-spmm && python benchmarks/spmm_row_split_curve.py
merge-spmm/result/Figure6_row.txt
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

K40C_BYTES_PER_S = 288e9
"""NVIDIA Tesla K40 board specification (BD-06902-001): 288 GB/s GDDR5."""
COLUMNS = 64
"""The dense matrix's columns in the artifact's runs (checked per row: ``gflops = 2 nnz 64 / time``)."""
CLASS_EDGES = (2, 4, 8, 16, 32, 64, 128, 256, float("inf"))


def read(path: Path) -> list[tuple[float, float]]:
    """(mean row length, rate relative to the K40c's bandwidth) of each matrix's row-split run."""
    out = []
    for line in path.read_text().splitlines():
        if not line.startswith("/"):
            continue
        fields = [f.strip() for f in line.rstrip(", ").split(",")]
        rows, nnz = int(fields[1]), int(fields[3])
        first = fields.index("cusparse")  # method blocks: name, avg_ms, gflops, gbps
        mean = float(fields[first - 4])
        methods = {fields[i]: (float(fields[i + 1]), float(fields[i + 2])) for i in range(first, len(fields) - 3, 4)}
        time_ms, gflops = methods["row split"]
        assert abs(gflops * 1e9 * time_ms * 1e-3 / (2 * nnz) - COLUMNS) < 0.5, line[:80]
        out.append((mean, (nnz + rows) * COLUMNS * 4 / (time_ms * 1e-3) / K40C_BYTES_PER_S))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="merge-spmm's result/Figure6_row.txt")
    matrices = read(parser.parse_args().results)
    print(f"{len(matrices)} matrices")
    for low, high in zip(CLASS_EDGES, CLASS_EDGES[1:]):
        chosen = [m for m in matrices if low <= m[0] < high]
        if chosen:
            length = statistics.median(m[0] for m in chosen)
            rate = statistics.median(m[1] for m in chosen)
            print(
                f"mean row length [{low}, {high}): {len(chosen):3d} matrices, median length {length:7.2f}, "
                f"median rate {rate:.3f}, time per row {(length + 1) / rate:5.1f} row streams"
            )


if __name__ == "__main__":
    main()
