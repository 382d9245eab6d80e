"""Model factories for ``plait estimate --model plait.workload.zoo:NAME`` (issue 17): published architectures
built by the field's libraries, each with the input one example takes.

- ``resnet50``: ResNet-50 (He et al., CVPR 2016, Table 1; the "v1.5" variant with the stride in the 3x3
  convolution, as torchvision's and NVIDIA's DeepLearningExamples'), 1000 classes, 224 x 224 RGB images. Built by
  Hugging Face ``transformers``' ``ResNetForImageClassification`` from ``ResNetConfig()``, whose defaults are
  microsoft/resnet-50's (transformers docs, "ResNetConfig"); torchvision's ``resnet50`` (``--model
  torchvision:resnet50``) is the same network where torchvision imports (its wheels on PyPI need the torch they
  were built with). Needs ``pip install 'plait[traced]'``.
"""

from __future__ import annotations

from typing import Any

from plait.errors import ConfigError


def resnet50() -> Any:
    """ResNet-50 for ImageNet (module docstring)."""
    try:
        from transformers import ResNetConfig, ResNetForImageClassification
    except ImportError:
        raise ConfigError("resnet50 needs Hugging Face transformers: pip install 'plait[traced]'") from None
    return ResNetForImageClassification(ResNetConfig(num_labels=1000))


resnet50.example_shape = (3, 224, 224)  # type: ignore[attr-defined]
resnet50.input_dtype = "float32"  # type: ignore[attr-defined]
