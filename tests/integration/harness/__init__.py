"""Two-node (or N-node) "pods" on one Linux machine with network namespaces.

See :mod:`tests.integration.harness.netns`.
"""

from tests.integration.harness.netns import Cluster, HarnessUnavailable, unavailable_reason

__all__ = ["Cluster", "HarnessUnavailable", "unavailable_reason"]
