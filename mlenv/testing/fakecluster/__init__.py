"""FakeCluster: a stateful in-memory fake of the Kubernetes/OpenShift API for tests.

It is a fake, named so everywhere, and it enforces the behaviour mlenv's code and tests
depend on, the way the real API server and controllers do:

- namespaces must exist; cluster-scoped kinds ignore the namespace;
- equality label selection; ``resourceVersion`` bumps on every change, ``generation``
  on spec changes; an apply that changes nothing changes nothing;
- server-side apply per field manager: fields another manager owns with a different
  value are a 409 conflict unless forced; fields a manager stops applying go away;
- immutable StatefulSet fields (selector, volumeClaimTemplates, serviceName,
  podManagementPolicy) and Pod spec fields (everything but container images,
  activeDeadlineSeconds and added tolerations) → 422 with the API server's message;
- permissions: ``denied`` lists "verb resource" pairs (``create securitycontextconstraints``);
  server-side apply needs ``create`` for a new object and ``patch`` for an existing one;
  ``can_i(..., as_user=<service account>)`` answers "use SCC" from the live RoleBindings;
  RBAC's escalation check: a RoleBinding to a role needs ``bind``/``escalate`` on it or
  holding everything it grants;
- quantities (resources, claim sizes) are stored in canonical form (``1024Gi`` → ``1Ti``);
- :mod:`mlenv.testing.scenarios` runs the same scenarios here and on the real plane;
- with ``openshift=False`` the OpenShift-only kinds (Route, BuildConfig, ImageStream, SCC…)
  do not exist: get/list/apply/delete answer NotFound as a plain Kubernetes API does;
- a StatefulSet controller creating pods ``<sts>-<i>`` (and PVCs from
  volumeClaimTemplates, which survive pod and StatefulSet deletion), SCC admission for
  pods that add capabilities, PVC binding through storage classes, a scheduler that
  honours node Readiness, allocatable GPUs/RDMA resources, node affinity and pod
  anti-affinity, Multus attachments and image pulls. Pods go Pending → scheduled →
  Running/Ready over controller "ticks" (:meth:`pause` runs one), and when they cannot,
  they stay Pending with the events the real components would emit;
- exec and rsync against an in-memory filesystem per volume (PVC-backed volumes are
  shared by every pod that mounts the claim, as RWX storage is). rsync follows rsync's
  pattern rules (``/x`` at the top only, ``x`` at any depth, excluded paths neither copied
  nor deleted); exec answers the tree checksum and scripted responses, per pod if wanted,
  including one that hangs until the call's timeout.

The package is split by job, each module a layer of the class:
:mod:`.state` (data, set-up, JSON), :mod:`.admission` (RBAC, SCC, immutable fields),
:mod:`.store` (server-side apply, get/list/delete, events), :mod:`.controllers`
(StatefulSet, PVC binding, scheduler, kubelet), :mod:`.pods` (exec, rsync, logs).
It lives under :mod:`mlenv.testing`, which the wheel does not ship: production code
never reaches it (docs/design-notes.md).

State round-trips through JSON (:meth:`save`/:meth:`load`) so CLI tests can inject it
across separate command invocations (:func:`state_file` for the in-process CLI,
:mod:`mlenv.testing.fake_mlenv` for an ``mlenv`` subprocess).
"""

from __future__ import annotations

from mlenv.testing.fakecluster.pods import Pods

__all__ = ["FakeCluster"]


class FakeCluster(Pods):
    """In-memory fake implementing :class:`mlenv.cluster.api.ClusterClient` (see package doc)."""

    description = "fake (in-memory)"
