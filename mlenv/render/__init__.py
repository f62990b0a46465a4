"""Rendering: a Cluster model in, validated Kubernetes/OpenShift manifests out.

- ``plan.render_cluster(cluster, mode, nodes)``: manifests in apply order (pure)
- ``env.nccl_env(cluster, mode)``: the NCCL_* variables a config implies
- ``validate.validate_manifests(manifests)``: schema check, InputError on failure
- ``write.render_files / write_tree / check_tree``: the ``k8s/<cluster>/<mode>/`` tree
- ``tree.render_tree``: all of the above for one cluster and mode
"""
