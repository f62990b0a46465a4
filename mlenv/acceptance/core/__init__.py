"""The check framework every other part of the suite stands on.

Owns what a check is (``base``: ``Check``, ``RunContext``, the registry), its typed
options (``options``) and the profiles that set them (``profiles``), which checks run
and in what order (``selection``), the one result shape (``result``), the strict YAML
reader (``yamlfile``), fault injection (``faults``) and the timing helpers every
measuring check shares (``timing``); ``optionsdoc`` writes the options table of
docs/acceptance.md. May import: the stdlib, ``mlenv.errors``, ``mlenv.contract``,
``mlenv.config.yamlpos``; never another part of ``mlenv.acceptance``.
"""
