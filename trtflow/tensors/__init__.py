"""Tensor sets on disk, Polygraphy JSON interop, and input generation/loading."""
