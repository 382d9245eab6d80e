"""Accelerators, clusters and network tiers, with every figure's provenance."""
