"""Inference engines beside the exact biLM: packed fp32, bf16, int8,
per-type first-layer products and word-type caches, chosen by one
:class:`InferenceEngine` (``bilm.engine``)."""
from .engine import INFERENCE_PRECISIONS, InferenceEngine, bf16_supported
from .int8 import int8_supported
from .packed import packing_supported

__all__ = ["INFERENCE_PRECISIONS", "InferenceEngine", "bf16_supported", "int8_supported", "packing_supported"]
