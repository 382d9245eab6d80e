"""The loss over each micro-batch's logits, and the training metrics a trainer computes from them.

The loss. Unless the engine fuses it, each pass moves the 16-bit logits in and an fp32 softmax over them, ``e + 4 +
4`` bytes per logit forward and the same backward. A fused softmax cross-entropy kernel (flash-attn's ``xentropy``,
derived from apex, which llm-foundry's ``fused_crossentropy`` loss calls) reads the logits twice forward, for their
maximum and sum and then the sum of exponentials (csrc/xentropy/xentropy_kernel.cu @v1.0.9
``cunn_SoftMaxXEntropyForward``, L452-467), and once backward, writing their gradient (``apply``, L502-519): ``2e``
bytes per logit each way.

Training metrics. Composer (0.13-0.17, the 2023 releases llm-foundry pinned: v0.3.0 setup.py
``mosaicml>=0.16.3,<0.17``) runs ``Trainer._eval_train_metrics`` after every micro-batch's backward
(composer/trainer/trainer.py v0.16.0 L2466-2470): under ``torch.no_grad`` and the run's precision context it updates
each training metric with the micro-batch's outputs. llm-foundry's ``ComposerMPTCausalLM`` lists
``LanguageCrossEntropy`` and ``LanguagePerplexity`` (v0.3.0 llmfoundry/models/mpt/modeling_mpt.py L697); each update
is ``torch.nn.CrossEntropyLoss(reduction='sum')`` over the ``tokens x vocab`` logits (composer/metrics/nlp.py v0.16.0
L99-120; perplexity subclasses cross-entropy and updates the same way). Per pass and logit, counted at its least HBM
traffic: ``cross_entropy`` runs in fp32 under autocast, so 16-bit logits are cast (read ``e``, write 4 bytes), then
``log_softmax`` reads and writes 4 bytes each; the ``nll_loss`` that follows reads one entry per token.
"""

from __future__ import annotations

from plait.cost.setup import Setup


def loss_bytes_per_logit(setup: Setup) -> float:
    """HBM bytes per logit of the loss in one pass, forward or backward (module docstring)."""
    e = setup.act_bytes
    return 2 * e if setup.framework.fused_cross_entropy else e + 4 + 4


def metric_bytes_per_logit(setup: Setup) -> float:
    """HBM bytes per logit of all the engine's training-metric passes
    (:attr:`plait.engine.facts.EngineFacts.train_metric_passes`; module docstring): each an fp32 cast of 16-bit
    logits, then ``log_softmax``'s read and write in fp32."""
    e = setup.act_bytes
    return setup.framework.train_metric_passes * ((e + 4 if e != 4 else 0) + 4 + 4)
