"""The trace tools: read, write, name, merge, split, stitch and check Chrome/Kineto traces.

Three rooms, each stating what it may import:

- ``format``: the files: read, written, compressed, repaired, checked, named;
- ``analysis``: what traces say: iterations, operators' and the device's
  time, Python frames, a step's numbers;
- ``rewrite``: traces rewritten: merged, aligned, stitched, split, renamed.

Pure Python, no engine imports; the step report (``report``) is an
application built on these.

May import: the base modules.
"""
