"""ml-dev-env: per-cluster YAML in, multi-node DeepSpeed on OpenShift and an acceptance verdict out."""

__version__ = "0.1.0"
