"""`cuda.bindings.utils` test double (cuda-bindings >= 12.9.1)."""


def get_cuda_native_handle(obj) -> int:
    """Returns the address of the provided CUDA Python object as a Python int."""
    return int(obj)
