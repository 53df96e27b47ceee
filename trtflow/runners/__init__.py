"""Backends that execute a model on inputs: onnxruntime, emulated precision, tensorrt, saved."""
