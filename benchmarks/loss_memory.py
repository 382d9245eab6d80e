"""Peak memory of the language-model loss per logit, eager against ``torch.compile``, side by side in one run.

Run: python benchmarks/loss_memory.py [--tokens 4096] [--vocab 128256]

Each variant runs in its own process: bf16 logits from a small output projection, then ``plait run``'s loss
(plait/run/train.py ``cross_entropy``: ``F.cross_entropy(logits.float(), labels)``, as torchtitan's
``components/loss.py``) forward and backward, eager or under ``torch.compile`` (torchtitan with
``training.compile``). tests/test_loss_memory.py runs the eager variant against the ``plait`` engine's figure. The process's peak resident memory above the level just before the logits are made,
divided by tokens x vocab, is the loss's peak bytes per logit (the peak is the kernel's high-water mark, reset
before the measured step through ``/proc/self/clear_refs``): the figure ``EngineFacts.loss_bytes_per_logit``
charges on the last pipeline stage (src/plait/engine/data/engines.toml cites this script). On the CPU the
tensors live in the process's memory and the large ones are mmap-backed, so resident memory follows what
is live; the partitioner that decides what a compiled graph saves is the same for every device.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

PROBE = """
import os, sys, torch
from plait.run.train import cross_entropy
mode, tokens, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hidden = 64
def resident():
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
fn = torch.compile(cross_entropy, dynamic=False) if mode == "compiled" else cross_entropy
def high_water():
    with open(f"/proc/{os.getpid()}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
h = torch.randn(1, tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
w = (torch.randn(vocab, hidden, dtype=torch.bfloat16) * 0.02).requires_grad_()
labels = torch.randint(0, vocab, (1, tokens))
logits = h @ w.t()  # compile (or warm up) on the measured shape first, then measure a second step
loss = fn(logits, labels)
del logits
loss.backward()
h.grad = w.grad = None
base = resident()
try:
    with open(f"/proc/{os.getpid()}/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident size to the current one (proc(5): /proc/pid/clear_refs)
except OSError:
    pass  # where it may not be reset, the warm-up step above peaked at the same level
logits = h @ w.t()
loss = fn(logits, labels)
del logits  # torchtitan's train step drops its reference before the backward (train.py 'del pred')
loss.backward()
peak = high_water()
print((peak - base) / (tokens * vocab))
"""


def measure(mode: str, tokens: int, vocab: int) -> float:
    """Peak bytes per logit of one variant, in a fresh process."""
    done = subprocess.run([sys.executable, "-c", PROBE, mode, str(tokens), str(vocab)], capture_output=True,
                          text=True, check=True, timeout=900)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=128256)
    args = parser.parse_args()
    eager = measure("eager", args.tokens, args.vocab)
    compiled = measure("compiled", args.tokens, args.vocab)
    print(f"tokens {args.tokens} x vocab {args.vocab}, bf16 logits, cross_entropy(logits.float())")
    print(f"  eager    peak {eager:6.2f} bytes per logit")
    print(f"  compiled peak {compiled:6.2f} bytes per logit")
    print(f"  ratio compiled/eager {compiled / eager:.3f}")


if __name__ == "__main__":
    main()
