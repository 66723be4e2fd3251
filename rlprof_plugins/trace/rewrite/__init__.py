"""Traces rewritten: ranks merged into one file, chunks stitched, a trace split by stage, ranks renamed and aligned.

``merge`` (every rank of a step into one trace, in processes of its own),
``align`` (ranks on different hosts put on one clock by their collectives'
ends), ``stitch`` (a session's chunks into one trace), ``stage_split`` (a
trace into its prefill and decode iterations) and ``rename`` (ranks' process
names as a merged view shows them).

May import: `analysis`, `format` and the base modules.
"""
