"""`reduce`: the smallest region of a model that fails a check on its own. `settings` (what a recipe
asks, and the repro recipe made from it), `region_graph` (regions of the model: boundary,
ancestors, extraction), `search` (the session), `report` (the report's model, light to import)."""
