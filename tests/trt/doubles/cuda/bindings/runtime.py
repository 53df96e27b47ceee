"""`cuda.bindings.runtime` test double."""

from cuda_double import *  # noqa: F401,F403
