"""Recipe models, YAML loading with source positions, and `${...}` references.

Shared by every layer: it knows the shape of a recipe, not what any step computes.
"""
