"""The shipped checks, one module per family, and what training uses (``models/``, ``datasets``).

Importing this package registers nothing: :data:`mlenv.acceptance.core.registry.SHIPPED`
lists the check modules and :func:`mlenv.acceptance.core.registry.load` imports them, so
the framework and the checks never import each other in a circle. Each check declares
its family's place in the run order (``run_order``) and what its metrics mean
(``metrics``); neither depends on import order. May import ``core``, ``evidence``,
``judging``, ``records``, ``reports``, ``mlenv.errors``, ``mlenv.contract``; torch and
DeepSpeed only inside the functions that measure.
"""
