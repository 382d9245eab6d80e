"""Model factories for ``plait estimate --model plait.workload.zoo:NAME``: published architectures
built by the field's libraries, each with the input one example takes.

- ``resnet50``: ResNet-50 (He et al., CVPR 2016, Table 1; the "v1.5" variant with the stride in the 3x3
  convolution, as torchvision's and NVIDIA's DeepLearningExamples'), 1000 classes, 224 x 224 RGB images. Built by
  Hugging Face ``transformers``' ``ResNetForImageClassification`` from ``ResNetConfig()``, whose defaults are
  microsoft/resnet-50's (transformers docs, "ResNetConfig"); torchvision's ``resnet50`` (``--model
  torchvision:resnet50``) is the same network where torchvision imports (its wheels on PyPI need the torch they
  were built with). Needs ``pip install 'plait[traced]'``. ``resnet101`` and ``resnet152``: the same network with
  deeper stages.
- ``bert_large``: BERT-large pre-training with flash attention; ``bert_large_unfused`` and
  ``bert_large_fused_softmax`` as NVIDIA DeepLearningExamples ran it in 2019 (eager, op by op) and 2021 (NVFuser),
  with the attention scores in memory; ``bert_large_fused_softmax_dense_mlm`` as its 2021 code ran by default, the
  masked-LM head on the masked tokens alone. Needs ``pip install 'plait[traced]'``.
- ``small_cnn``: a small residual convolutional network for 32 x 32 RGB images (a CIFAR-size input), small enough
  for ``plait run`` to train on CPU ranks in seconds (``plait plan --model plait.workload.zoo:small_cnn --export``).
  Plain PyTorch (``plait[run]``). Its blocks normalise with ``GroupNorm`` (Wu & He, ECCV 2018), which, unlike
  ``BatchNorm``, computes on each example alone: data-parallel training over any split of the batch equals one
  process's.
- ``small_mlp``: a small residual MLP of 64 features whose blocks are linear pairs (column- then row-parallel), so
  its traced plans may take tensor parallelism; plain PyTorch (``plait[run]``), trained on CPU ranks in seconds.
- ``small_transformer``: a small pre-norm transformer (grouped-query causal self-attention and a GELU MLP per block)
  whose attentions split by heads and MLPs by pairs; plain PyTorch (``plait[run]``), trained on CPU ranks in seconds.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Literal

from plait.errors import MissingExtra

IMPORT_NOISE = ("torchao", "torch.utils._pytree")
"""Loggers that warn while ``transformers`` imports, about nothing plait uses: torchao (which ``transformers``
imports for its quantizers wherever it is installed) failing to load its CUDA kernels on a CPU build, and torch's
pytree deprecation notes on torchao's enums."""


@contextlib.contextmanager
def _quiet_transformers_import() -> Iterator[None]:
    """Keep :data:`IMPORT_NOISE`'s warnings off the user's screen while ``transformers`` loads (errors still show)."""
    loggers = [logging.getLogger(name) for name in IMPORT_NOISE]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def resnet50() -> Any:
    """ResNet-50 for ImageNet (module docstring)."""
    try:
        with _quiet_transformers_import():
            from transformers import ResNetConfig, ResNetForImageClassification
    except ImportError as exc:
        raise MissingExtra("resnet50", "traced", (exc.name or "transformers").split(".")[0]) from None
    return ResNetForImageClassification(ResNetConfig(num_labels=1000))


resnet50.example_shape = (3, 224, 224)  # type: ignore[attr-defined]
resnet50.input_dtype = "float32"  # type: ignore[attr-defined]


def _resnet(depths: list[int]) -> Any:
    """A bottleneck ResNet of ``depths`` blocks per stage, otherwise :func:`resnet50`'s."""
    try:
        with _quiet_transformers_import():
            from transformers import ResNetConfig, ResNetForImageClassification
    except ImportError as exc:
        raise MissingExtra("resnet", "traced", (exc.name or "transformers").split(".")[0]) from None
    return ResNetForImageClassification(ResNetConfig(num_labels=1000, depths=depths))


def resnet101() -> Any:
    """ResNet-101 for ImageNet: ResNet-50's bottleneck stages with 3, 4, 23 and 3 blocks (He et al., CVPR 2016,
    Table 1), v1.5 as :func:`resnet50`."""
    return _resnet([3, 4, 23, 3])


def resnet152() -> Any:
    """ResNet-152 for ImageNet: 3, 8, 36 and 3 bottleneck blocks (He et al., CVPR 2016, Table 1), v1.5 as
    :func:`resnet50`."""
    return _resnet([3, 8, 36, 3])


for _deep in (resnet101, resnet152):
    _deep.example_shape, _deep.input_dtype = (3, 224, 224), "float32"  # type: ignore[attr-defined]


def bert_large() -> Any:
    """BERT-large for pre-training (Devlin et al., NAACL 2019, Sec. 3: 24 layers, hidden 1024, 16 heads,
    feed-forward 4096, dropout 0.1; masked-LM and next-sentence heads) with NVIDIA DeepLearningExamples' vocabulary
    of 30,528 (the 30,522 WordPiece tokens padded to a multiple of 8, PyTorch/LanguageModeling/BERT/bert_configs/
    large.json), built by Hugging Face ``transformers``' ``BertForPreTraining`` with its SDPA attention (a fused
    kernel, as GPUs run it) over unpadded sequences: the wrapper calls the embeddings, the encoder without a mask
    and the heads, the steps of ``BertModel.forward`` save its mask preparation, which reads the mask's values
    (no meta tensor holds them). One example is a sequence of 128 tokens (``--input-shape 512`` for phase 2)."""
    return _bert_large("sdpa")


def _bert_large(attention: Literal["sdpa", "eager", "fused_softmax"], num_layers: int = 24,
                masked_fraction: float | None = None) -> Any:
    """:func:`bert_large` with ``transformers``' attention implementation ``attention``; "eager" (the 2019 model of
    :func:`bert_large_unfused`) takes ``BertModel.forward``'s additive padding mask, all tokens kept, and adds the
    linear layers' biases after their products; "fused_softmax" is :func:`_fused_softmax`'s. With
    ``masked_fraction`` the masked-LM head runs on that fraction of each sequence's tokens alone, gathered by an
    ``index_select`` (:func:`bert_large_fused_softmax_dense_mlm`); without, on every token.
    ``num_layers`` below 24 builds a shallower copy (for tests)."""
    try:
        import torch
        from transformers import BertConfig, BertForPreTraining
    except ImportError as exc:
        raise MissingExtra("bert_large", "traced", (exc.name or "transformers").split(".")[0]) from None

    class UnmaskedBert(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            config = BertConfig(vocab_size=30528, hidden_size=1024, num_hidden_layers=num_layers,
                                num_attention_heads=16, intermediate_size=4096, max_position_embeddings=512,
                                attn_implementation="sdpa" if attention == "sdpa" else "eager")
            self.model = BertForPreTraining(config)
            if attention != "sdpa":
                wrap = _context_only if attention == "eager" else _fused_softmax
                for layer in self.model.bert.encoder.layer:
                    layer.attention.self.__class__ = wrap(type(layer.attention.self))
            if attention == "eager":  # PyTorch 1.2's F.linear on the 3-D activations, GeLU's bias fused
                for layer in self.model.bert.encoder.layer:
                    for linear in (layer.attention.self.query, layer.attention.self.key, layer.attention.self.value,
                                   layer.attention.output.dense, layer.output.dense):
                        linear.__class__ = _bias_after_matmul()
                self.model.cls.predictions.decoder.__class__ = _bias_after_matmul()

        def forward(self, input_ids: Any) -> Any:
            bert = self.model.bert
            mask = None
            if attention == "eager":  # [batch, 1, 1, length], zero: no token masked
                mask = torch.zeros((input_ids.shape[0], 1, 1, input_ids.shape[1]), device=input_ids.device,
                                   dtype=bert.embeddings.word_embeddings.weight.dtype)
            hidden = bert.encoder(bert.embeddings(input_ids=input_ids), attention_mask=mask, return_dict=False)[0]
            if masked_fraction is not None:  # which tokens are masked does not change the cost: the first ones
                batch, length, width = hidden.shape
                kept = torch.arange(batch * max(1, round(length * masked_fraction)), device=hidden.device)
                dense = torch.index_select(hidden.reshape(-1, width), 0, kept)
                return (self.model.cls.predictions(dense).float().mean()
                        + self.model.cls.seq_relationship(bert.pooler(hidden)).float().mean())
            scores, next_sentence = self.model.cls(hidden, bert.pooler(hidden))
            return scores.float().mean() + next_sentence.float().mean()

    return UnmaskedBert()


def _bias_after_matmul() -> Any:
    """``torch.nn.Linear`` as PyTorch 1.2's ``F.linear`` ran it on inputs of more than two dimensions
    (torch/nn/functional.py ``linear`` @v1.2.0: ``output = input.matmul(weight.t())``, then ``output += bias``): the
    product, then the bias added in a pass of its own over the output."""
    import torch

    class BiasAfterMatmul(torch.nn.Linear):
        def forward(self, x: Any) -> Any:
            out = x.matmul(self.weight.t())
            if self.bias is not None:
                out += self.bias
            return out

    return BiasAfterMatmul


def _context_only(attention_class: Any) -> Any:
    """``attention_class`` returning its context alone: ``transformers``' eager BERT attention also returns its
    probabilities, which nothing reads, and an output whose gradient never arrives confuses the module tracker's
    backward attribution (:mod:`plait.workloads.traced.tracing`)."""

    class ContextOnly(attention_class):  # type: ignore[misc, valid-type]
        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return super().forward(*args, **kwargs)[0], None

    return ContextOnly


def _fused_softmax(attention_class: Any) -> Any:
    """``attention_class`` as a fusing compiler runs the unfused attention of :func:`bert_large_unfused`: the two
    batched GEMMs keep their materialised ``length x length`` scores, and the scale, the mask, the softmax and the
    dropout between them are one kernel forward and one backward, traced as a softmax and its dropout, which the
    factories that use it declare fused (``fused_softmax_dropout``,
    :func:`plait.workloads.traced.softmax_dropout.fuse_softmax_dropout`: the kernel saves the probabilities, the
    dropped probabilities and the dropout's mask)."""
    import torch

    class FusedSoftmax(attention_class):  # type: ignore[misc, valid-type]
        def forward(self, hidden: Any, *args: Any, **kwargs: Any) -> Any:
            batch, length, _ = hidden.shape

            def heads(x: Any) -> Any:
                return x.view(batch, length, self.num_attention_heads, self.attention_head_size).transpose(1, 2)

            query, key, value = heads(self.query(hidden)), heads(self.key(hidden)), heads(self.value(hidden))
            probabilities = self.dropout(torch.softmax(torch.matmul(query, key.transpose(-1, -2)), dim=-1))
            return torch.matmul(probabilities, value).transpose(1, 2).reshape(batch, length, -1), None

    return FusedSoftmax


bert_large.example_shape = (128,)  # type: ignore[attr-defined]
bert_large.input_dtype = "int64"  # type: ignore[attr-defined]


def bert_large_unfused() -> Any:
    """:func:`bert_large` with attention as NVIDIA DeepLearningExamples' PyTorch BERT ran it before fused attention
    kernels (``BertSelfAttention.forward`` in PyTorch/LanguageModeling/BERT/modeling.py, at 6fe463f (2019-09) and
    a9e2c1d5 (2022-03) alike): the score matrix of every head materialised by a batched GEMM, divided by the square
    root of the head size, the additive padding mask added, softmax, dropout, and a second batched GEMM with the
    values, each its own kernel over ``batch x heads x length x length`` elements (``transformers``' "eager"
    attention is the same code, inherited from the same Google/Hugging Face port). Its linear layers on the 3-D
    activations add their bias after the product, as PyTorch 1.2 ran them (:func:`_bias_after_matmul`; the
    feed-forward GeLU's bias is fused in ``bias_gelu``, the masked-LM decoder's added by ``+ self.bias``,
    ``BertLMPredictionHead.forward`` @6fe463f)."""
    return _bert_large("eager")


bert_large_unfused.example_shape = (128,)  # type: ignore[attr-defined]
bert_large_unfused.input_dtype = "int64"  # type: ignore[attr-defined]


def bert_large_fused_softmax() -> Any:
    """:func:`bert_large_unfused` as a fusing compiler runs it (:func:`_fused_softmax`): DeepLearningExamples' PyTorch
    BERT of pytorch:21.11 scripts that model (``torch.jit.script``) with NVFuser on
    (PyTorch/LanguageModeling/BERT/run_pretraining.py @a9e2c1d5, lines 56-60 and 408-409); NVFuser's parser
    registers softmax and its backward as normalizations that fuse with their pointwise neighbours
    (torch/csrc/jit/codegen/cuda/parser.cpp, pytorch/pytorch@004700b4; assumed: that container fused the scale,
    mask, softmax and dropout chain so)."""
    return _bert_large("fused_softmax")


bert_large_fused_softmax.example_shape = (128,)  # type: ignore[attr-defined]
bert_large_fused_softmax.input_dtype = "int64"  # type: ignore[attr-defined]
bert_large_fused_softmax.fused_softmax_dropout = True  # type: ignore[attr-defined]

MASKED_FRACTION = 0.15
"""Share of a pre-training sequence's tokens the masked-LM task predicts: BERT's 15% (Devlin et al., NAACL 2019,
Sec. 3.1, 'Task #1: Masked LM'). DeepLearningExamples' pytorch:21.11 scripts mask statically when LDDL preprocesses
the corpus (scripts/run_pretraining.sh @a9e2c1d5: the default ``masking=static`` passes ``--masking``), and LDDL
predicts ``max(1, round(tokens x masked_lm_ratio))`` tokens per sequence, ``--masked-lm-ratio`` 0.15 by default
(NVIDIA/LDDL@556d701f lddl/dask/bert/pretrain.py, ``create_masked_lm_predictions``): 19 of 128 tokens."""


def bert_large_fused_softmax_dense_mlm() -> Any:
    """:func:`bert_large_fused_softmax` with the masked-LM head on the masked tokens alone, as DeepLearningExamples'
    pytorch:21.11 BERT runs it by default: ``BertPreTrainingHeads.forward`` gathers the positions whose label is
    not -1 with ``torch.index_select`` before the head's transform and vocabulary decoder when
    ``sequence_output_is_dense`` (PyTorch/LanguageModeling/BERT/modeling.py @a9e2c1d5, lines 587-591), which
    run_pretraining.py sets unless ``--no_dense_sequence_output`` is passed (@a9e2c1d5, line 542); the 2019 code
    (@6fe463f) decodes every token (:func:`bert_large_unfused`). The share kept is :data:`MASKED_FRACTION`."""
    return _bert_large("fused_softmax", masked_fraction=MASKED_FRACTION)


bert_large_fused_softmax_dense_mlm.example_shape = (128,)  # type: ignore[attr-defined]
bert_large_fused_softmax_dense_mlm.fused_softmax_dropout = True  # type: ignore[attr-defined]
bert_large_fused_softmax_dense_mlm.input_dtype = "int64"  # type: ignore[attr-defined]


def small_cnn() -> Any:
    """A small residual CNN for 32 x 32 images (module docstring): a 3x3 stem to 32 channels, four residual blocks
    (two 3x3 convolutions with GroupNorm and ReLU each, He et al., CVPR 2016, Fig. 2), global average pooling and a
    10-way linear head."""
    try:
        from torch import nn
    except ImportError as exc:
        raise MissingExtra("small_cnn", "run", "torch") from exc

    class ResidualBlock(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
            self.norm1 = nn.GroupNorm(4, width)
            self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
            self.norm2 = nn.GroupNorm(4, width)

        def forward(self, x: Any) -> Any:
            y = self.norm1(self.conv1(x)).relu()
            return (x + self.norm2(self.conv2(y))).relu()

    width = 32
    return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), *(ResidualBlock(width) for _ in range(4)),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10))


small_cnn.example_shape = (3, 32, 32)  # type: ignore[attr-defined]
small_cnn.input_dtype = "float32"  # type: ignore[attr-defined]


def small_mlp() -> Any:
    """A small residual MLP over 64 features (module docstring): a linear stem to 32, four blocks of a 32 -> 128
    linear, GELU and a 128 -> 32 linear added to the block's input (the transformer's MLP block, Vaswani et al.
    2017, Sec. 3.3, without attention), and a 10-way linear head. Each block's two linears are a Megatron pair
    (column- then row-parallel: Shoeybi et al. 2019, Sec. 3), so its plans may take tensor parallelism."""
    try:
        from torch import nn
    except ImportError as exc:
        raise MissingExtra("small_mlp", "run", "torch") from exc

    class MlpBlock(nn.Module):
        def __init__(self, width: int, hidden: int) -> None:
            super().__init__()
            self.fc1 = nn.Linear(width, hidden)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(hidden, width)

        def forward(self, x: Any) -> Any:
            return x + self.fc2(self.act(self.fc1(x)))

    width = 32
    return nn.Sequential(nn.Linear(64, width), *(MlpBlock(width, 4 * width) for _ in range(4)), nn.Linear(width, 10))


small_mlp.example_shape = (64,)  # type: ignore[attr-defined]
small_mlp.input_dtype = "float32"  # type: ignore[attr-defined]


def small_transformer() -> Any:
    """A small pre-norm transformer over 8 positions of 32 features (module docstring): a linear stem, two blocks of
    causal grouped-query self-attention (4 query heads and 2 key/value heads of 8: Vaswani et al. 2017, Sec. 3.2;
    Ainslie et al. 2023) and a GELU MLP (32 -> 128 -> 32), each added to its input after a LayerNorm, and a 10-way
    linear head. Each attention splits by heads and each MLP is a Linear pair (Shoeybi et al. 2019, Sec. 3)."""
    try:
        import torch
        from torch import nn
    except ImportError as exc:
        raise MissingExtra("small_transformer", "run", "torch") from exc

    class Attention(nn.Module):
        def __init__(self, width: int, heads: int, kv_heads: int) -> None:
            super().__init__()
            self.head_dim, self.repeats = width // heads, heads // kv_heads
            self.wq = nn.Linear(width, width)
            self.wk, self.wv = (nn.Linear(width, kv_heads * self.head_dim) for _ in range(2))
            self.wo = nn.Linear(width, width)

        def forward(self, x: Any) -> Any:
            b, s = x.shape[:2]  # the head counts are inferred (-1): a tensor-parallel rank holds heads / tp
            q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
            k, v = k.repeat_interleave(self.repeats, dim=1), v.repeat_interleave(self.repeats, dim=1)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(o.transpose(1, 2).reshape(b, s, -1))

    class Block(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.norm1, self.attention = nn.LayerNorm(width), Attention(width, 4, 2)
            self.norm2, self.fc1 = nn.LayerNorm(width), nn.Linear(width, 4 * width)
            self.fc2 = nn.Linear(4 * width, width)

        def forward(self, x: Any) -> Any:
            x = x + self.attention(self.norm1(x))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))

    width = 32
    return nn.Sequential(nn.Linear(width, width), *(Block(width) for _ in range(2)), nn.Linear(width, 10))


small_transformer.example_shape = (8, 32)  # type: ignore[attr-defined]
small_transformer.input_dtype = "float32"  # type: ignore[attr-defined]
