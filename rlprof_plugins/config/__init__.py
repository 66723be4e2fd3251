"""Configuration and requests: what the user asks for, validated once at the edge.

``options`` (the keys of ``--profiler-config``, rlprof's and the engines'
native ones, validated at start-up), ``key_reference`` (each key in one
line, the docs' key table), ``launch_config`` (that JSON where the
engine has no profiler configuration of its own: ``RLPROF_PROFILER_CONFIG``,
SGLang's ``--profiler-config``), ``request_fields`` (every start-request
field, declared once) and ``requests`` (one start request for both engines,
parsed once wherever it arrives). The errors they raise, naming the key or
field at fault, are ``rlprof_plugins.errors``: a base module, so the output
store and the backends raise them too.

Never a session, a patch or an engine.
May import: `step_sources`, `backends` (each backend's keys), `store` (a request's folder) and the base modules.
"""
