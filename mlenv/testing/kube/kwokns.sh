#!/bin/sh
# Start kwok in a mount namespace of its own in which the whole host is read-only except
# the tier's folder (host safety). Every process kwok starts for exec,
# port-forward or logs inherits this namespace, so even a command named by absolute path
# (which bypasses the per-pod wrapper, confine.sh) cannot write outside the tier's folder.
# Run as: unshare --mount --propagation private -- kwokns.sh TIER KWOK ARGS...
set -eu
# kwok resolves an exec's command name with its own PATH (the tier's shims, each a link to
# confine.sh): keep it for kwok, and use the system's only for the mounts below.
kwok_path=$PATH
PATH=/usr/sbin:/usr/bin:/sbin:/bin
tier=$1
shift
# The tier's folder stays writable: it becomes a mount of its own before the rest goes
# read-only (a bind remount changes only that mount, and only in this namespace).
mount --bind "$tier" "$tier"
# /proc/sys is writable by root through procfs even on a read-only root: bind it read-only.
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
# Every other mount, read-only (only in this private namespace; the host's are untouched).
awk '{print $5}' /proc/self/mountinfo | while read -r mp; do
    case "$mp" in
        "$tier"|"$tier"/*|/proc|/proc/*) continue ;;
    esac
    mount -o remount,bind,ro "$mp" 2>/dev/null || true
done
# Refuse to start when / is still writable: confinement is the point of this script.
if touch /.mlenv-kube-tier-probe 2>/dev/null; then
    rm -f /.mlenv-kube-tier-probe
    echo "kwokns.sh: / is still writable in kwok's namespace; refusing to start kwok" >&2
    exit 3
fi
PATH=$kwok_path
export PATH
exec "$@"
