"""Precision plans (which ONNX nodes run in which precision) and the ONNX rewrites realizing them."""
