"""The facts about an ONNX model that every layer needs, in one place at the bottom.

Reading and writing models of any size with their external data (`files`), the tensor catalog
(`catalog`), the low-precision number formats (`formats`) and keep files (`keep_files`). Steps,
runners, precision plans, tensors, graphs and the TensorRT layer all build on these and nothing
here imports any of them, so none of those packages has to reach sideways into another for them.
"""
