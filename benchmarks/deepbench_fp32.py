"""The fp32 GEMM and convolution curves of efficiency.toml (v100, p100, t4) from DeepBench's training tables.

DeepBench (baidu-research/DeepBench@da81ba78, results/train/DeepBench_NV_V100.xlsx: DGX-1 V100, CUDA 10.1.243,
cuDNN 7.6.2; DeepBench_NV_P100.xlsx: Tesla P100, CUDA 8.0.88, cuDNN 6.0.21; DeepBench_NV_T4.xlsx: NVIDIA T4, CUDA
10.1.243, cuDNN 7.6.2.24), sheet "Results FP32": cuBLAS SGEMM
times by M, N, K and cuDNN convolution times by shape, forward, backward wrt inputs and wrt parameters, with the
forward algorithm cuDNN picked. Each measurement becomes a point at plait's square-equivalent edge
(:func:`plait.workloads.traced.timing.kernel_s`: ``3 F / (2 elements moved)``): a GEMM at ``3 / (1/M + 1/N + 1/K)``;
a convolution's forward at its input, filter and output elements, its backward (data and filter gradients, ATen's
one ``convolution_backward``) at twice the input and filter and once the output gradient. Each curve point is the
median fraction of the fp32 peak (15.7 TFLOPS V100 SXM2, 10.6 P100 SXM2: NVIDIA datasheets) over a factor-of-two
class of edge, classes with under 3 points left out; 3x3 stride-1 convolutions in direct-convolution FLOPs over
4 times the peak (Winograd F(4x4, 3x3)'s multiplies, plait.workloads.traced.winograd.WINOGRAD_F4X4_REDUCTION).
Rows without a backward wrt inputs (first layers) are left out of the convolution curves. ``--sheet NAME`` reads the
GEMMs of another sheet alone, with their plateau (the median fraction at edges of 1024 and up): the T4's 16-bit
figure (matmul_bf16) is the plateau of its "Results - FP16 ip, Mixed math" sheet (fp16 inputs, fp32 accumulation)
over the 65 TFLOPS tensor peak.

Usage: python benchmarks/deepbench_fp32.py DeepBench_NV_V100.xlsx 15.7
       python benchmarks/deepbench_fp32.py DeepBench_NV_T4.xlsx 65 --sheet "Results - FP16 ip, Mixed math"
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import xml.etree.ElementTree as ET
import zipfile

NS = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"


def sheet_rows(path: str, name: str) -> list[dict[str, str]]:
    """The cells of sheet ``name`` of an .xlsx file, row by row, by column letter (the standard library only)."""
    book = zipfile.ZipFile(path)
    shared = [
        "".join(t.text or "" for t in si.iter(f"{{{NS['m']}}}t"))
        for si in ET.fromstring(book.read("xl/sharedStrings.xml")).findall("m:si", NS)
    ]
    targets = {r.get("Id"): r.get("Target") for r in ET.fromstring(book.read("xl/_rels/workbook.xml.rels"))}
    sheet = next(s for s in ET.fromstring(book.read("xl/workbook.xml")).find("m:sheets", NS) if s.get("name") == name)
    target = targets[sheet.get(REL)].lstrip("/")
    root = ET.fromstring(book.read(target if target.startswith("xl/") else "xl/" + target))
    rows = []
    for row in root.iter(f"{{{NS['m']}}}row"):
        cells = {}
        for c in row.findall("m:c", NS):
            v = c.find("m:v", NS)
            if v is not None:
                cells[re.match(r"[A-Z]+", c.get("r", "")).group()] = (
                    shared[int(v.text)] if c.get("t") == "s" else v.text
                )
        rows.append(cells)
    return rows


def number(text: str | None) -> float | None:
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def gemm_points(rows: list[dict[str, str]]) -> list[tuple[float, float]]:
    """(edge, TFLOP/s) of each SGEMM (columns M, N, K, time in ms)."""
    out = []
    for r in rows:
        m, n, k, ms = (number(r.get(c)) for c in "CDEI")
        if None not in (m, n, k, ms):
            out.append((3.0 / (1 / m + 1 / n + 1 / k), 2 * m * n * k / (ms * 1e9)))
    return out


def conv_points(rows: list[dict[str, str]]) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(edge, TFLOP/s) of each pass of the 3x3 stride-1 convolutions and of the others."""
    winograd, other = [], []
    for r in rows:
        v = [number(r.get(c)) for c in "CDEFGHILMNOPRS"]
        if None in v:
            continue
        w, h, c, n, k, s, rr, sw, sh, fwd, data, grad, p, q = v
        flops = 2 * n * k * c * rr * s * p * q
        x, f, y = n * c * h * w, k * c * rr * s, n * k * p * q
        points = [
            (3 * flops / (2 * (x + f + y)), flops / (fwd * 1e9)),
            (3 * flops / (2 * x + 2 * f + y), 2 * flops / ((data + grad) * 1e9)),
        ]
        (winograd if (rr, s, sw, sh) == (3, 3, 1, 1) else other).extend(points)
    return winograd, other


def curve(points: list[tuple[float, float]], scale_tflops: float) -> list[tuple[int, float, int]]:
    """(median edge, median fraction of ``scale_tflops``, points) per factor-of-two class of edge, 3 points or more."""
    classes: dict[int, list[tuple[float, float]]] = {}
    for edge, tflops in points:
        classes.setdefault(int(math.log2(edge)), []).append((edge, tflops / scale_tflops))
    return [
        (round(statistics.median(e for e, _ in c)), round(statistics.median(f for _, f in c), 3), len(c))
        for _, c in sorted(classes.items())
        if len(c) >= 3
    ]


def main(path: str, peak_tflops: float, sheet: str | None = None) -> None:
    rows = sheet_rows(path, sheet or "Results FP32")
    conv = next(i for i, r in enumerate(rows) if r.get("A") == "Convolution")
    if sheet:
        gemms = gemm_points(rows[:conv])
        print(f"{sheet} GEMMs (edge, fraction, points):", curve(gemms, peak_tflops))
        plateau = [t / peak_tflops for e, t in gemms if e >= 1024]
        print("plateau (median fraction, points at edge >= 1024):", round(statistics.median(plateau), 3), len(plateau))
        return
    end = next(i for i, r in enumerate(rows) if i > conv and r.get("A"))
    winograd, other = conv_points(rows[conv + 1 : end])
    print("matmul_fp32 (edge, fraction, points):", curve(gemm_points(rows[:conv]), peak_tflops))
    print("conv3x3_fp32:", curve(winograd, 4 * peak_tflops))
    print("conv_fp32:", curve(other, peak_tflops))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a DeepBench results/train workbook")
    parser.add_argument("peak_tflops", type=float, help="the peak the fractions are of, TFLOPS")
    parser.add_argument("--sheet", help="another sheet's GEMMs alone, with their plateau")
    args = parser.parse_args()
    if args.peak_tflops <= 0:
        parser.error(f"peak_tflops={args.peak_tflops} must be > 0")
    main(args.path, args.peak_tflops, args.sheet)
