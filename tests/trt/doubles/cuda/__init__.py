"""Test double of the `cuda` package of cuda-python (see cuda_double.py)."""
