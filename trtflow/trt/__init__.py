"""The TensorRT-facing library: what differs between TensorRT generations, building, running, timing.

`api` is the only module that knows which TensorRT release can do what; the others ask it. Nothing
here imports `tensorrt` or `cuda` at module level: `trtflow validate`, `dag` and `status` must work
on machines without a GPU.
"""
