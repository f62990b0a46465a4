#!/usr/bin/env bash
# Install the system tools the integration tier uses, only when missing and only as
# root with apt. Never fails by itself: tests that need a missing tool skip with why (the
# image lint in lint-image.sh is the exception under make/CI: it fails without its linters).
set -u
need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v pdsh >/dev/null 2>&1 || need+=(pdsh)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
# bsdtar (macOS's tar): the kubectl sync path packs with the control host's tar, GNU or BSD.
command -v bsdtar >/dev/null 2>&1 || need+=(libarchive-tools)
# nss_wrapper: the random-UID harness test's read-only /etc/passwd variant (the image has it too).
compgen -G '/usr/lib/*/libnss_wrapper.so*' >/dev/null || need+=(libnss-wrapper)
# Slurm: the integration tests start a real controller and slurmd's under a temp dir.
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || need+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || [ -x /usr/sbin/slurmd ] || need+=(slurmd)
command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || need+=(munge)
command -v sbatch >/dev/null 2>&1 || need+=(slurm-client)
# sshd -t refuses to run without its privilege-separation directory, which Debian's
# service unit (not the package) creates; containers have no unit, so make it here.
privsep() { [ "$(id -u)" = 0 ] && mkdir -p /run/sshd 2>/dev/null; return 0; }
[ ${#need[@]} -eq 0 ] && { privsep; exit 0; }
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: missing ${need[*]} (not root or no apt): the tests that need them will skip," \
       "and make test's image lint fails without shellcheck (MLENV_SKIP_IMAGE_LINT=1 opts out)" >&2
  exit 0
fi
echo "system-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >/tmp/mlenv-system-deps.log 2>&1 \
  || echo "system-deps: apt-get failed (see /tmp/mlenv-system-deps.log): dependent tests will skip" >&2
privsep
exit 0
