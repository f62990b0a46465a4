"""``render_cluster``: a Cluster model in, the manifests ``deploy`` would apply out (pure).

Simple kinds come from templates (``mlenv/data/templates/``); the worker objects (their
pod template, wrapped by the cluster's ``mlenv.workload``) and the dev Pod are built in
Python (``mlenv.render.workload``). Nothing here touches files or
a cluster; validation (``mlenv.render.validate``) and serialising (``mlenv.render.serialize``; writing is ``mlenv.generated``'s)
are separate steps.
"""

from __future__ import annotations

import json
from typing import Any

from mlenv.config.model import Cluster, Mode
from mlenv.contract import MAX_NODES
from mlenv.errors import InputError
from mlenv.render import names, recheck
from mlenv.render.templating import render_template
from mlenv.render.workload import (
    DEV_TOOLS,
    dev_pod,
    dev_tool_name,
    enabled_dev_tools,
    exposed_dev_tools,
    oauth,
    route_termination,
    service_port,
    text_annotations,
    tls_secret,
    workers,
)
from mlenv.workload import WORKER_KINDS

PRIVILEGED_SCC_ROLE = "system:openshift:scc:privileged"
# Volume types the SCC allows: restricted-v2's own list (the RDMA SCC is restricted-v2
# plus IPC_LOCK). "projected" is the service-account token volume the kubelet adds to
# every pod; the SR-IOV network resources injector adds a downwardAPI volume to
# pods that request an SR-IOV resource, and with our first four types alone those pods
# were refused at creation.
SCC_VOLUMES = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
]

# Apply order: identities and permissions first, then the image, storage, networking
# (the NetworkPolicies before the pods they guard, so no pod ever runs unguarded),
# workloads, and the Routes that point at them.
KIND_ORDER = [
    "ServiceAccount",
    "SecurityContextConstraints",
    "ClusterRole",
    "Role",
    "RoleBinding",
    "ImageStream",
    "BuildConfig",
    "PersistentVolumeClaim",
    "Service",
    "NetworkPolicy",
    *WORKER_KINDS,
    "Pod",
    "CronJob",  # the scheduled re-check execs into pod-0, so after the workloads
    "Route",
]


def resolve_nodes(cluster: Cluster, nodes: int | None) -> int:
    """Pod count: ``nodes`` or ``gpus.default_nodes``; InputError if it cannot be scheduled."""
    n = cluster.gpus.default_nodes if nodes is None else nodes
    if n < 1:
        raise InputError(f"--nodes must be at least 1, got {n}")
    if n > MAX_NODES:
        raise InputError(f"--nodes {n}: at most {MAX_NODES} nodes")
    if cluster.gpu_nodes and n > len(cluster.gpu_nodes):
        # required anti-affinity + node pinning: pod n+1 would stay Pending forever
        raise InputError(
            f"--nodes {n} exceeds the {len(cluster.gpu_nodes)} pinned nodes.gpu_nodes of "
            f"cluster {cluster.name!r} (one pod per node)"
        )
    return n


def _service_account(cluster: Cluster) -> dict[str, Any]:
    annotations = text_annotations(cluster)
    for tool in enabled_dev_tools(cluster) if oauth(cluster) else []:
        # lets each oauth-proxy use this service account as an OAuth client for its Route
        suffix = DEV_TOOLS[tool][0]
        ref = {
            "kind": "OAuthRedirectReference",
            "apiVersion": "v1",
            "reference": {"kind": "Route", "name": dev_tool_name(tool)},
        }
        annotations[f"serviceaccounts.openshift.io/oauth-redirectreference.{suffix}"] = json.dumps(
            ref, sort_keys=True
        )
    return render_template(
        "serviceaccount.yaml.j2",
        "ServiceAccount",
        name=cluster.security.service_account,
        namespace=cluster.namespace,
        labels=names.labels(cluster, "worker"),
        annotations=annotations,
    )


def _rdma_security(cluster: Cluster) -> list[dict[str, Any]]:
    if not cluster.security.requires_privileged_scc and not cluster.security.ipc_lock:
        # the RDMA SCC is restricted-v2 plus IPC_LOCK; without IPC_LOCK it would add
        # nothing, and asking a non-admin to create it only forced a TCP fallback. The pods
        # run under restricted-v2 (device-plugin resources and Multus need no SCC).
        return []
    # cluster-scoped: the namespace label says whose they are (teardown selects on it)
    lab = {**names.labels(cluster, "security"), names.LABEL_NAMESPACE: cluster.namespace}
    out: list[dict[str, Any]] = []
    if cluster.security.requires_privileged_scc:
        role = PRIVILEGED_SCC_ROLE
    else:
        out.append(
            render_template(
                "securitycontextconstraints-rdma.yaml.j2",
                "SecurityContextConstraints",
                name=names.scc_name(cluster),
                labels=lab,
                annotations={
                    "kubernetes.io/description": (
                        f"ml-dev-env RDMA pods of {cluster.name}: restricted-v2 plus "
                        + ("IPC_LOCK" if cluster.security.ipc_lock else "no added capability")
                    )
                },
                allowed_capabilities=["IPC_LOCK"] if cluster.security.ipc_lock else [],
                volumes=SCC_VOLUMES,
            )
        )
        role = names.scc_role_name(cluster)
        out.append(
            render_template(
                "clusterrole-scc.yaml.j2",
                "ClusterRole",
                name=role,
                labels=lab,
                scc=names.scc_name(cluster),
            )
        )
    out.append(
        render_template(
            "rolebinding-scc.yaml.j2",
            "RoleBinding",
            name=names.SCC_ROLEBINDING,
            namespace=cluster.namespace,
            labels=lab,
            cluster_role=role,
            service_account=cluster.security.service_account,
        )
    )
    return out


def _image(cluster: Cluster) -> list[dict[str, Any]]:
    lab = names.labels(cluster, "build")
    b = cluster.image.build
    return [
        render_template(
            "imagestream.yaml.j2",
            "ImageStream",
            name=names.IMAGE_STREAM,
            namespace=cluster.namespace,
            labels=lab,
        ),
        render_template(
            "buildconfig.yaml.j2",
            "BuildConfig",
            name=names.BUILD_CONFIG,
            namespace=cluster.namespace,
            labels=lab,
            git_uri=b.git_uri,
            git_ref=b.git_ref,
            dockerfile_path=b.dockerfile_path,
            output_tag=f"{names.IMAGE_STREAM}:latest",
        ),
    ]


def _pvcs(cluster: Cluster) -> list[dict[str, Any]]:
    st = cluster.storage
    lab = names.labels(cluster, "storage")
    if st.mode == "rwx":
        claims = [
            (names.WORKSPACE_PVC, "ReadWriteMany", st.class_rwx, st.workspace_size),
            (names.DATASETS_PVC, "ReadWriteMany", st.class_rwx, st.datasets_size),
        ]
    else:
        # workers get theirs from volumeClaimTemplates; the dev Pod needs its own
        claims = [(names.DEV_WORKSPACE_PVC, "ReadWriteOnce", st.class_rwo, st.workspace_size)]
    # an existing claim named in the config is mounted, never created
    skip = set()
    if st.workspace_claim:
        skip.add(names.WORKSPACE_PVC if st.mode == "rwx" else names.DEV_WORKSPACE_PVC)
    if st.datasets_claim:
        skip.add(names.DATASETS_PVC)
    claims = [c for c in claims if c[0] not in skip]
    return [
        render_template(
            "persistentvolumeclaim.yaml.j2",
            "PersistentVolumeClaim",
            name=name,
            namespace=cluster.namespace,
            labels=lab,
            access_mode=mode,
            storage_class=sc,
            size=size,
        )
        for name, mode, sc, size in claims
    ]


def _services(cluster: Cluster) -> list[dict[str, Any]]:
    out = [
        render_template(
            "service-headless.yaml.j2",
            "Service",
            name=names.HEADLESS_SERVICE,
            namespace=cluster.namespace,
            labels=names.labels(cluster, "worker"),
            selector=names.selector_labels(cluster, "worker"),
            ssh_port=cluster.ssh_port,
            master_port=cluster.master_port,
        )
    ]
    for tool in exposed_dev_tools(cluster):
        _, port_name, _, _ = DEV_TOOLS[tool]
        port = service_port(cluster, tool)
        annotations: dict[str, str] = {}
        if oauth(cluster):
            # the service CA issues oauth-proxy's serving certificate into this Secret
            annotations["service.beta.openshift.io/serving-cert-secret-name"] = tls_secret(tool)
        out.append(
            render_template(
                "service-devtool.yaml.j2",
                "Service",
                name=dev_tool_name(tool),
                namespace=cluster.namespace,
                labels=names.labels(cluster, "dev"),
                annotations=annotations,
                selector=names.selector_labels(cluster, "dev"),
                port_name=port_name,
                port=port,
            )
        )
    return out


def _routes(cluster: Cluster) -> list[dict[str, Any]]:
    out = []
    for tool in exposed_dev_tools(cluster):
        _, port_name, _, _ = DEV_TOOLS[tool]
        termination = route_termination(cluster, tool)
        out.append(
            render_template(
                "route.yaml.j2",
                "Route",
                name=dev_tool_name(tool),
                namespace=cluster.namespace,
                labels=names.labels(cluster, "dev"),
                service=dev_tool_name(tool),
                port_name=port_name,
                termination=termination,
            )
        )
    return out


# Traffic from the OpenShift router. Since OpenShift 4.7 the namespace selector label
# `policy-group.network.openshift.io/ingress: ""` matches the Ingress Controller's traffic
# whether it runs on the cluster network or the host network (bare-metal GPU clusters
# usually publish the router with HostNetwork); `network.openshift.io/policy-group: ingress`
# is the legacy label on openshift-ingress that OpenShift still honours but documents as
# removable (OpenShift 4.7 release notes, "Network policy supports selecting host network
# Ingress Controllers"). Both are listed (peers are ORed). Plain Kubernetes has no such
# convention: name the ingress controller's namespace in security.allow_from_namespaces.
ROUTER_NAMESPACE_SELECTORS = [
    {"network.openshift.io/policy-group": "ingress"},  # legacy
    {"policy-group.network.openshift.io/ingress": ""},  # current, host-network routers too
]
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace since k8s 1.21


def _network_policies(cluster: Cluster) -> list[dict[str, Any]]:
    """ingress to this deployment's pods only from its own pods (sshd, rendezvous,
    NCCL: NCCL's data ports are ephemeral, so every port), and to the dev-tool ports also
    from the router and ``security.allow_from_namespaces``.

    NetworkPolicies add up: a pod selected by any policy admits the union of their rules,
    so the dev-tool policy only widens the dev Pod's tool ports. Traffic from the node
    (kubelet probes, ``port-forward``) is always allowed by NetworkPolicy semantics.
    """
    if not cluster.security.network_policy:
        return []
    # name + instance: every pod of this deployment (workers and the dev Pod), no other
    instance = {
        k: v
        for k, v in names.selector_labels(cluster, "dev").items()
        if k != "app.kubernetes.io/component"
    }
    out = [
        render_template(
            "networkpolicy.yaml.j2",
            "NetworkPolicy",
            name=names.NETWORK_POLICY_INSTANCE,
            namespace=cluster.namespace,
            labels=names.labels(cluster, "security"),
            pod_selector=instance,
            ingress=[{"from": [{"podSelector": {"matchLabels": instance}}]}],
        )
    ]
    tools = exposed_dev_tools(cluster)
    if tools:
        peers: list[dict[str, Any]] = [
            {"namespaceSelector": {"matchLabels": sel}} for sel in ROUTER_NAMESPACE_SELECTORS
        ]
        peers += [
            {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}}
            for ns in cluster.security.allow_from_namespaces
        ]
        ports = [{"protocol": "TCP", "port": service_port(cluster, t)} for t in tools]
        out.append(
            render_template(
                "networkpolicy.yaml.j2",
                "NetworkPolicy",
                name=names.NETWORK_POLICY_DEVTOOLS,
                namespace=cluster.namespace,
                labels=names.labels(cluster, "security"),
                pod_selector=names.selector_labels(cluster, "dev"),
                ingress=[{"from": peers, "ports": ports}],
            )
        )
    return out


def openshift_features_off(cluster: Cluster) -> list[str]:
    """What ``platform: kubernetes`` leaves out of the plan (said once by deploy): empty on OpenShift."""
    if cluster.traits.openshift:
        return []
    off = ["the SCC for IPC_LOCK (RDMA pods need a namespace whose PodSecurity level allows it)"]
    off.append(
        "the image build (image.ref is the pods' image)"
        if cluster.image.ref
        else "the image build: set image.ref to an image the nodes can pull"
    )
    if exposed_dev_tools(cluster):
        off.append("Routes for the dev tools (use `mlenv port-forward`)")
    return off


def render_cluster(
    cluster: Cluster, mode: Mode, nodes: int | None = None, *, validate: bool = True
) -> list[dict[str, Any]]:
    """Every manifest for ``cluster`` in ``mode`` with ``nodes`` pods, in apply order.

    The effective mode is ``cluster.effective_mode(mode)`` (rdma on a TCP-only cluster
    renders TCP; the caller prints ``mlenv.config.mode_warnings``). With ``validate``
    (the default, so ``deploy`` can never apply an unchecked plan) every manifest is
    checked against the Kubernetes/OpenShift schemas. Raises InputError for a node count
    that cannot be scheduled or a manifest that fails validation. Pure: same input, same
    output, no files or network.
    """
    n = resolve_nodes(cluster, nodes)
    eff = cluster.effective_mode(mode)
    manifests: list[dict[str, Any]] = [_service_account(cluster)]
    # plain Kubernetes serves none of OpenShift's kinds; what `render` writes is
    # exactly what `deploy` applies, so they are left out here, not skipped at apply time.
    openshift = cluster.traits.openshift
    if eff == "rdma" and openshift:
        manifests += _rdma_security(cluster)
    if not cluster.image.ref and openshift:
        # with an explicit image.ref the pods never use the ImageStream tag, and the
        # BuildConfig's ConfigChange trigger would start a pointless build
        manifests += _image(cluster)
    manifests += _pvcs(cluster)
    manifests += _services(cluster)
    manifests += _network_policies(cluster)
    manifests += workers(cluster, mode, n)
    manifests.append(dev_pod(cluster, mode))
    if openshift:
        manifests += _routes(cluster)
    manifests += recheck.manifests(cluster)  # none without acceptance.schedule
    order = {k: i for i, k in enumerate(KIND_ORDER)}
    # stable sort keeps the within-kind order above
    manifests.sort(key=lambda m: order[m["kind"]])
    if validate:
        from mlenv.render.validate import validate_manifests

        validate_manifests(manifests, f"cluster {cluster.name!r} (mode {mode})")
    return manifests
