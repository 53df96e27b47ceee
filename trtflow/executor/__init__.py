"""Runs recipes: the DAG, cache keys, the artifact store, locks, journals and run records.

It never knows what a step computes: it hands each step its params and a folder, and stores
what comes back.
"""
