"""trtflow: declarative YAML recipes for ONNX / TensorRT accuracy debugging."""

__version__ = "0.1.0"
