# ml-dev-env pod image: NGC PyTorch (CUDA, NCCL, torch) + DeepSpeed, sshd and pdsh for
# the DeepSpeed launcher, RDMA user tools, and the mlenv package whose scripts/ are the
# entry points. Built on the cluster by BuildConfig ml-dev-env (`mlenv build CLUSTER`).
# Runs as a non-root user and under OpenShift's random UID (group 0, g=u permissions).
# Pinned: bump together with docs/deploy.md. 24.08 = CUDA 12.6, torch 2.5, Python 3.10.
FROM nvcr.io/nvidia/pytorch:24.08-py3

ARG DEEPSPEED_VERSION=0.19.8
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    MLENV_HOME=/opt/ml-dev-env \
    HOME=/home/mlenv \
    TORCH_EXTENSIONS_DIR=/home/mlenv/.cache/torch_extensions

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# sshd + pdsh: DeepSpeed's multi-node launcher; rdma-core/ibverbs-utils/perftest/
# infiniband-diags: ibv_devinfo, ib_write_bw, ibstat for RDMA checks; libnss-wrapper:
# a passwd entry for a random UID when /etc/passwd cannot be written.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      openssh-server openssh-client pdsh \
      rdma-core ibverbs-utils perftest infiniband-diags \
      libnss-wrapper iproute2 rsync tar procps \
 && rm -rf /var/lib/apt/lists/* \
 && rm -f /etc/ssh/ssh_host_*

# DeepSpeed ops are JIT-built at first use (TORCH_EXTENSIONS_DIR), keeping the image
# independent of the GPU generation it lands on.
RUN python -m pip install --no-cache-dir "deepspeed==${DEEPSPEED_VERSION}"

# Dev tools the renderer can expose (dev_tools: in the config): code-server here; jupyter
# and tensorboard come with the NGC base. They listen on 127.0.0.1 behind an oauth-proxy
# sidecar, or (dev_tools.auth: token) take their password/token from Secret
# ml-dev-env-devtools through the environment (docs/rendering.md). The release tarball is
# checked against a pinned sha256 before anything is unpacked: a tag or asset
# re-pushed upstream, or a tampered mirror, fails the build instead of landing in the image.
# An empty checksum fails too (no silent unverified download). Bump version and checksum
# together (sha256 of code-server-<v>-linux-amd64.tar.gz from the release page), and
# docs/deploy.md.
ARG CODE_SERVER_VERSION=4.96.4
ARG CODE_SERVER_SHA256=b3f9025d00f2cdf61caf83945ef7225d4a3eb576c4c007e45868f45713e39c8e
RUN test -n "${CODE_SERVER_SHA256}" || { echo "CODE_SERVER_SHA256 is empty: refusing an unverified download" >&2; exit 1; } \
 && curl -fsSL -o /tmp/code-server.tar.gz \
      "https://github.com/coder/code-server/releases/download/v${CODE_SERVER_VERSION}/code-server-${CODE_SERVER_VERSION}-linux-amd64.tar.gz" \
 && echo "${CODE_SERVER_SHA256}  /tmp/code-server.tar.gz" | sha256sum --check --strict - \
 && tar -xzf /tmp/code-server.tar.gz -C /opt \
 && rm -f /tmp/code-server.tar.gz \
 && ln -s "/opt/code-server-${CODE_SERVER_VERSION}-linux-amd64/bin/code-server" /usr/local/bin/code-server

# debugpy: `make dev-session` attaches a remote debugger to a rank on port 5678.
ARG DEBUGPY_VERSION=1.8.22
RUN python -m pip install --no-cache-dir "debugpy==${DEBUGPY_VERSION}"

WORKDIR ${MLENV_HOME}
COPY pyproject.toml README.md ./
COPY mlenv ./mlenv
COPY scripts ./scripts
COPY workspace ./workspace-template
# torch and deepspeed come from the base image and the step above: don't let pip swap them
RUN python -m pip install --no-cache-dir --no-deps . \
 && python -m pip install --no-cache-dir "typer>=0.12" "pyyaml>=6.0" "jsonschema>=4.20" "jinja2>=3.1" "prometheus-client>=0.20" \
 && chmod 0755 scripts/*.sh

# Non-root user in group 0; everything it writes is g=u so a random UID (also in group 0)
# can use it. /etc/passwd g=u lets pod init add the random UID (sshd needs an entry).
RUN useradd --uid 1001 --gid 0 --home-dir /home/mlenv --create-home --shell /bin/bash mlenv \
 && mkdir -p /workspace /datasets /home/mlenv/.ssh /home/mlenv/.cache \
 && chown -R 1001:0 /workspace /datasets /home/mlenv ${MLENV_HOME} \
 && chmod -R g=u /workspace /datasets /home/mlenv ${MLENV_HOME} \
 && chmod g=u /etc/passwd

USER 1001
WORKDIR /workspace
EXPOSE 2222 29500
ENTRYPOINT ["/opt/ml-dev-env/scripts/pod-init.sh"]
