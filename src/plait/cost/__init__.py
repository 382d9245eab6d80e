"""Pure cost functions: FLOPs, memory, compute time, collectives, pipeline, step assembly.

Imports nothing from torch; every function is deterministic and cheap enough for the
planner to call hundreds of thousands of times.
"""
