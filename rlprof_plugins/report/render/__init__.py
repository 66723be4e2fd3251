"""The report's last stage: the page, the JSON, the CSVs and the summary, made from a view and the passes'
results alone (it opens no file).

May import: `execute` and `plan`, `step_logs`, `metrics`, `trace`, `store` and the base modules.
"""
