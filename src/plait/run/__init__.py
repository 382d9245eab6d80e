"""The runtime: apply a Plan with torch.distributed (DeviceMesh, DTensor TP, FSDP2, DDP, ZeRO-1,
pipelining, activation checkpointing, DCP) and train. Needs PyTorch (``pip install plait[run]``);
nothing outside this package imports it."""
