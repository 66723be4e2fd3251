"""The step report (``rlprof report``, issue 33): what changed between global steps.

``steps`` computes the numbers, one row per global step below a root, from
the same streaming pass as ``rlprof summary``; the page, its charts and the
command build on it.
"""
