"""Running a world of ranks: rendezvous, the per-rank runner, and the local launcher.

Owns the world (``world``: the TCP store rendezvous that names ranks that never joined,
heartbeats, the side channel results travel on), running each check under its deadline
on every rank (``runner``), each rank's own log (``ranklog``) and ``mlenv acceptance
--local`` (``local``: the suite on this machine through the DeepSpeed launcher). May
import every other part of ``mlenv.acceptance``, ``mlenv.errors``, ``mlenv.contract`` and
``mlenv.pod`` (GPU count); nothing in the suite imports it but the entry point
(``mlenv/acceptance/__main__.py``) and the CLI/platform layers.
"""
