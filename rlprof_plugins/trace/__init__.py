"""Post-processing of Chrome/Kineto traces (stage splitting; merge and
summaries come next). Pure Python, no engine imports."""
