"""A validation row of ``gnn_epochs.csv`` written out as the files a user would give ``plait estimate``: the row
alone in a CSV read back as a :class:`plait.validate.records.Record`, and a GNN TOML of its graph and model, for the
tests that check plait estimate's path prices a row as ``plait validate gnn`` does."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

from plait.validate.records import Record, read_records
from plait.workloads.gnn.model import GraphStats
from plait.workloads.gnn.validate import COLUMNS

ROWS = Path(__file__).parents[1] / "src/plait/validate/data/gnn_epochs.csv"


def first_row(tmp_path: Path, keep: Callable[[dict[str, str]], bool]) -> Record:
    """The first row of the table that ``keep`` accepts, read back through the row reader from a one-row CSV."""
    with ROWS.open(newline="") as f:
        row = next(r for r in csv.DictReader(f) if keep(r))
    one = tmp_path / "row.csv"
    with one.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    return read_records(one, "--gnn file", COLUMNS)[0]


def job_toml(tmp_path: Path, row: Record, g: GraphStats, extra: str = "") -> Path:
    """A GNN TOML of graph ``g`` and the row's model (hidden dropout on), ``extra`` TOML appended."""
    toml = tmp_path / "job.toml"
    toml.write_text(
        f"[graph]\nnodes = {g.nodes}\nedges = {g.edges}\nfeatures = {g.features}\nclasses = {g.classes}\n"
        f"train_nodes = {g.train_nodes}\ndegree_exponent = {g.degree_exponent}\nmax_degree = {g.max_degree}\n"
        f"degree_histogram = {[list(c) for c in g.degree_histogram]}\n"
        f"[model]\nlayers = {row['layers']}\nhidden = {row['hidden']}\ndropout = true\n"
        f"fanouts = [{row['fanouts'].replace('-', ', ')}]\n" + extra
    )
    return toml
