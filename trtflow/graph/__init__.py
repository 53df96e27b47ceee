"""A graph model built from ONNX or TensorRT engine JSON, rendered as DOT, SVG and HTML."""
