"""Step kinds: one module per kind, each a `Step` subclass (see `base`), found through `registry`."""
