"""How plait's binned phase-2 BERT rows compare with NVIDIA's measured binning speedup.

``plait.workloads.traced.validate.BINNED_PHASE2`` traces DeepLearningExamples' pytorch:21.11 phase-2 rows at the mean
padded length 512 x binned / unbinned seconds (work taken as linear in length). For each single-GPU phase-2 row this
prints plait's step at that length over its step at 512 tokens beside the measured ratio, and the row's error both
ways: traced at that length (as ``plait validate classic``), and traced at 512 with the step scaled by the measured
ratio (which holds only if the measurement's end-to-end latencies had no start-up time). Nothing here is fitted.

Run: ``PYTHONPATH=src python benchmarks/binned_length.py`` (about a minute: four traces of BERT-large).
"""

from __future__ import annotations

from plait.validate.datasets import dataset_path
from plait.validate.records import read_records
from plait.workloads.traced import validate


def main() -> None:
    unbinned_s, binned_s = validate.BINNED_PHASE2["DLE_PYT_BERT_2111"]
    measured_ratio = binned_s / unbinned_s
    binned_row_model = validate.row_model
    for row in read_records(dataset_path("classic"), "classic", validate.COLUMNS):
        if row["source_id"] != "DLE_PYT_BERT_2111" or row["gpus"] != "1" or not row["model"].endswith("seq512"):
            continue
        binned = validate.predict_row(row)
        validate.row_model = lambda r: (binned_row_model(r)[0], (512,))
        full = validate.predict_row(row)
        validate.row_model = binned_row_model
        assert binned.predicted_per_s and full.predicted_per_s
        ratio = full.predicted_per_s / binned.predicted_per_s
        scaled_pct = 100.0 * (binned.measured_per_s * measured_ratio / full.predicted_per_s - 1.0)
        print(
            f"{binned.label:55s} plait step {binned_row_model(row)[1]} / (512,) {ratio:.3f} vs measured "
            f"{measured_ratio:.3f}; error {binned.error_pct:+.1f}% as traced, {scaled_pct:+.1f}% at 512 x measured"
        )


if __name__ == "__main__":
    main()
