"""A discrete-event simulation of one training step across the ranks of one pipeline."""
