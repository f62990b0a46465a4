"""Two-node (or N-node) "pods" on one Linux machine with network namespaces.

See :mod:`harness.netns`. Importable as ``harness`` because pytest puts
``tests/integration/`` on sys.path (rootdir-relative "prepend" import mode).
"""

from harness.netns import Cluster, HarnessUnavailable, unavailable_reason

__all__ = ["Cluster", "HarnessUnavailable", "unavailable_reason"]
