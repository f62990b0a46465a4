#!/bin/sh
# A pod's process, confined to the pod's own root (host safety).
#
# kwok runs every exec with its own PATH, which holds only the tier's shims folder: each
# command name there is a link to this script. The pod's Exec object (written by the
# tier's pod-root controller, podroots.py) gives MLENV_KUBE_POD_ROOT; the command then runs
# in the pod's mount and UTS namespace, held by the pod's root holder (podroot.sh: the
# pod's overlay, volumes and names, mounted once for the pod's life), chrooted into the
# overlay, and in the pod's own network namespace, held by the pod's network holder
# (podnet.py: the pause container). Both are entered through /proc/PID/ns/* after
# checking that the namespace there is the one recorded in <pod root>/rootns and
# <pod root>/netns (a pid reused by another process has another namespace). So every
# process of a pod sees the same files. Without a pod root, its mounts or its network,
# nothing runs. The scale nodes' kwok-only pods (MLENV_KUBE_SHARED_ROOT=1, docs/deploy.md
# "Scale nodes") have no root holder: each of their execs mounts an overlay of its own in
# a new mount namespace, over their one shared root's network.
set -eu
PATH=/usr/sbin:/usr/bin:/sbin:/bin
tier=${MLENV_KUBE_TIER:-}
root=${MLENV_KUBE_POD_ROOT:-}
if [ -z "$tier" ] || [ -z "$root" ]; then
    echo "kube tier: no pod root for this exec: refusing to run $(basename "$0") unconfined" >&2
    exit 126
fi
case "$root" in
    "$tier"/pods/*/*) ;;
    *) echo "kube tier: pod root $root is not under $tier/pods: refusing" >&2; exit 126 ;;
esac
# The record's first three fields: holder pid, its start time (unused here), the inode of
# its network namespace.
netns_pid= netns_inode=
if [ -r "$root/netns" ]; then
    read -r netns_pid _ netns_inode _ < "$root/netns" || true
fi
case "$netns_pid:$netns_inode" in
    :*|*:|*[!0-9:]*) echo "kube tier: pod $root has no network (no $root/netns): refusing to run $(basename "$0")" >&2
                 exit 126 ;;
esac
shared=${MLENV_KUBE_SHARED_ROOT:-}
# The root record's first and third fields: the holder's pid and its mount namespace's inode.
root_pid= root_inode=
if [ -r "$root/rootns" ]; then
    read -r root_pid _ root_inode _ < "$root/rootns" || true
fi
case "$shared:$root_pid:$root_inode" in
    1:*) ;;
    *::*|*:|*[!0-9:]*) echo "kube tier: pod $root has no root mounted (no $root/rootns): refusing to run $(basename "$0")" >&2
                 exit 126 ;;
esac
if [ "${1:-}" != "--mlenv-kube-inner" ]; then
    # Called by a command's name (a shim: kwok's exec), or as confine.sh with the command
    # as its first argument (the kubelet's container command and exec probes, which may
    # name it by path: /opt/ml-dev-env/scripts/pod-init.sh).
    name=$(basename "$0")
    if [ "$name" = confine.sh ]; then
        [ $# -ge 1 ] || { echo "kube tier: confine.sh: no command" >&2; exit 126; }
        name=$1
        shift
    fi
    if [ "$(stat -L -c %i "/proc/$netns_pid/ns/net" 2>/dev/null)" != "$netns_inode" ]; then
        echo "kube tier: the network holder of $root (pid $netns_pid) is gone: refusing to run $(basename "$0")" >&2
        exit 126
    fi
    if [ "$shared" = 1 ]; then
        exec nsenter "--net=/proc/$netns_pid/ns/net" -- \
            unshare --mount --uts --propagation private -- "$tier/bin/confine.sh" --mlenv-kube-inner "$name" "$@"
    fi
    if [ "$(stat -L -c %i "/proc/$root_pid/ns/mnt" 2>/dev/null)" != "$root_inode" ]; then
        echo "kube tier: the root holder of $root (pid $root_pid) is gone: refusing to run $(basename "$0")" >&2
        exit 126
    fi
    exec nsenter "--net=/proc/$netns_pid/ns/net" "--mount=/proc/$root_pid/ns/mnt" \
        "--uts=/proc/$root_pid/ns/uts" -- "$tier/bin/confine.sh" --mlenv-kube-inner "$name" "$@"
fi
shift
# Checked again from inside: a pid could have been reused between the check and nsenter.
if [ "$(stat -L -c %i /proc/self/ns/net)" != "$netns_inode" ] ||
    { [ "$shared" != 1 ] && [ "$(stat -L -c %i /proc/self/ns/mnt)" != "$root_inode" ]; }; then
    echo "kube tier: $root: not in the pod's namespaces: refusing" >&2
    exit 126
fi
cmd=$1
shift
m=$root/merged
if [ "$shared" = 1 ]; then
    # Two overlays cannot share a work folder, so each exec gets its own, on a tmpfs of
    # this mount namespace that goes with it; only the volumes persist.
    mkdir -p "$root/exec"
    mount -t tmpfs -o mode=0755 scale-exec "$root/exec"
    m=$root/exec/merged upper=$root/exec/upper work=$root/exec/work
    mkdir -p "$upper" "$work" "$m"
    mount -t overlay overlay -o "lowerdir=/,upperdir=$upper,workdir=$work" "$m"
    mount --rbind /dev "$m/dev"
    mount --rbind /proc "$m/proc"
    mount --rbind /sys "$m/sys"
    mount -t tmpfs -o size=64k,mode=0700 tier-hidden "$m$tier"
    printf '%s\n' "${MLENV_KUBE_MOUNTS:-}" | while IFS='=' read -r dest src; do
        [ -n "$dest" ] || continue
        case "$src" in "$tier"/*) ;; *) echo "kube tier: volume $src outside the tier: skipped" >&2; continue ;; esac
        # Resolved inside the pod's root: /var/run is a link to /run, and a link followed
        # from outside the chroot would land on the host's /run (read-only here, and not ours).
        chroot "$m" mkdir -p -- "$dest"
        real=$(chroot "$m" realpath -e -- "$dest")
        mount --bind "$src" "$m$real"
    done
    hostname "${MLENV_KUBE_POD_NAME:-pod}"
fi
# The container's identity (the pod-root controller's, mlenv/testing/kube/identity.py):
# its UID, GID, supplementary groups, bounding set of capabilities (root's effective set;
# a non-root UID keeps none, as CRI-O and containerd run it) and no_new_privs. setpriv
# drops to it inside the pod's root, after chroot, which needs CAP_SYS_CHROOT. An exec
# without one (the scale nodes' shared root) runs as before.
drop=
if [ -n "${MLENV_KUBE_UID+x}" ]; then
    uid=${MLENV_KUBE_UID} gid=${MLENV_KUBE_GID:-0} groups=${MLENV_KUBE_GROUPS:-}
    caps=${MLENV_KUBE_CAPS:-} nnp=${MLENV_KUBE_NNP:-}
    case "$uid:$gid:$groups:$caps:$nnp" in
        :*|*[!0-9a-z_,:]*|*:*:*[!0-9,]*:*:*|*[!0-9]*:*:*:*:*|*:*[!0-9]*:*:*:*)
            echo "kube tier: $root: identity '$uid:$gid:$groups:$caps:$nnp' is not UID:GID:GROUPS:CAPS:NNP: refusing" >&2
            exit 126 ;;
    esac
    bounding=-all
    for c in $(printf '%s' "$caps" | tr ',' ' '); do bounding="$bounding,+$c"; done
    if [ -n "$groups" ]; then grouping=--groups=$groups; else grouping=--clear-groups; fi
    drop="/usr/bin/setpriv --reuid=$uid --regid=$gid $grouping --inh-caps=-all --ambient-caps=-all --bounding-set=$bounding"
    [ "$nnp" = 1 ] && drop="$drop --no-new-privs"
    drop="$drop --"
fi
unset MLENV_KUBE_POD_ROOT MLENV_KUBE_MOUNTS MLENV_KUBE_TIER MLENV_KUBE_NAMES MLENV_KUBE_SHARED_ROOT
unset MLENV_KUBE_UID MLENV_KUBE_GID MLENV_KUBE_GROUPS MLENV_KUBE_CAPS MLENV_KUBE_NNP
# chroot is found with the system PATH above: the pod's own PATH (below) may lack /usr/sbin.
chroot_bin=$(command -v chroot)
PATH=${MLENV_KUBE_PATH:-/usr/local/bin:/usr/bin:/bin}
export PATH
# $drop unquoted: its words were checked above (digits, commas, capability names)
# shellcheck disable=SC2086
exec "$chroot_bin" "$m" $drop /bin/sh -c 'cd "${MLENV_KUBE_WORKDIR:-/}" 2>/dev/null || cd /; exec "$@"' sh "$cmd" "$@"
