"""TensorRT backend tests (a package, so its module names cannot clash with other test folders)."""
