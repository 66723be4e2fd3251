"""The report's second stage: the passes a view names, run where the files are (this process, a pool of
processes, or the Ray nodes that hold them), their results kept in the cache of passes.

May import: `plan`, `step_logs`, `metrics`, `trace`, `store` and the base modules.
"""
