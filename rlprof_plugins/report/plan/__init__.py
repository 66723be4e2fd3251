"""The report's first stage: ROOT read once into a view of its servers, steps and the passes they need.

May import: `step_logs`, `metrics`, `trace`, `store` and the base modules.
"""
