"""Post-processing of Chrome/Kineto traces: merge, stage split, summary, check,
and the streaming reader/writer under them. Pure Python, no engine imports."""
