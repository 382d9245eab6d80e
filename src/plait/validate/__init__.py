"""Predicted vs measured step times of public training runs."""
