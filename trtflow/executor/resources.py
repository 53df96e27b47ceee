"""Whether this machine can know a step's key: it can unless the step needs a GPU it lacks.

A step that needs a GPU is keyed by the TensorRT version and GPU of the machine that runs it
(`Step.fingerprint`). A machine without TensorRT or a GPU — a CPU head that hands such steps to
GPU workers — would key it with facts that are not the worker's, so `status` and `--dry-run` say
the key cannot be predicted here instead of guessing one that would never match.
"""

from __future__ import annotations

from trtflow.schema.recipe import Resources

UNKEYABLE_HERE = (
    "key depends on facts of the machine that runs it (TensorRT version, GPU), "
    "which this machine does not have"
)


def gpus_here() -> int:
    """GPUs TensorRT can use on this machine (the CUDA facts name the first one only: 0 or 1)."""
    from trtflow.trt.environment import NOT_INSTALLED, cuda, tensorrt_version

    if tensorrt_version() == NOT_INSTALLED:
        return 0
    found = cuda()
    return 1 if found and found.gpu else 0


def keyable_here(needs: Resources) -> bool:
    """True when this machine has the facts the key of a step with these needs is made of."""
    return needs.gpu == 0 or gpus_here() >= needs.gpu
