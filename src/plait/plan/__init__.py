"""The Plan: one typed parallel layout that every later stage consumes."""

from plait.plan.plan import Plan

__all__ = ["Plan"]
