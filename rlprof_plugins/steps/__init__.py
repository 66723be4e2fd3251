"""Step sources: which RL global step a start request records into.

A request's own ``global_step`` always wins. Where the caller names none,
a step source may give one: ``trainer`` (the step a trainer integration hands
over within one call: verl's server actors, ``patches/verl``), or with
``step_source: weight_version`` the engine's own weight version
(``weight_version``). ``choice`` picks among them. Imports only the small
helpers.
"""
