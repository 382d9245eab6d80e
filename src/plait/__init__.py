"""plait: plan, predict and run distributed deep-learning training.

The prediction core (workload, hardware, plan, cost, validate) is pure Python and
imports without PyTorch; only the runtime needs torch.
"""

__version__ = "0.1.0"
