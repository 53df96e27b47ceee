"""The precision search (`bisect-precision`): the smallest verified set of nodes that must stay in
high precision. `settings` (what a recipe asks), `spaces` (what a plan varies: FP16/BF16/FP8 nodes,
Q/DQ pairs), `search` (the session), `outcome` (what it found, in the report's and the tools'
terms), `report` (the report's model, light to import)."""
