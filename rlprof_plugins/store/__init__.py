"""The output store: what lands on disk, where, and how it is kept.

``layout`` (where a session's files go; nothing is written outside the
configured directory), ``step_files`` (which trace files of a step folder
belong together and whose they are; a folder's merges), ``manifest`` (each step folder's
``manifest.json``, one section per writer, under a lock), ``processes`` (which
process wrote a section, and whether it still runs), ``reaping`` (writers that
died mid-export marked ``failed``, their temporaries removed, recorded data
kept), ``retention`` (``keep_last_steps``) and ``recovery`` (a kept recording
finished by a command: its manifest section says ``done``). Object stores:
``destination`` (a URI output folder as a folder of the node's spool),
``upload`` (the uploader process: spool to bucket, its state in the manifests),
``object_store`` (the one module that imports fsspec) and ``remote_read`` (a
URI read back through a local copy of what a command needs).

The trace tools, the backends and the sessions build on it.
May import: `trace` (the names and rank files of the traces a step folder holds) and the base modules.
"""
