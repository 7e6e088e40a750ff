"""A V2 (Open Inference Protocol) model server on onnxruntime, with faults for chaos tests."""

__version__ = "0.1.0"
