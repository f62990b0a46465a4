#!/bin/sh
# A pod's root, mounted once: what a container runtime sets up before the container's
# first process, and holds for the pod's life (the pause container of the mount side).
#
# Started by the pod-root controller (podroots.start_root) in a mount namespace made as
# kwok's is (kwokns.sh: the host read-only but the tier's folder), then in a mount and UTS
# namespace of its own:
#   unshare --mount --propagation private -- kwokns.sh TIER \
#       unshare --mount --uts --propagation private -- podroot.sh TIER POD_ROOT POD_NAME
# It mounts an overlay of the host's (read-only) / whose upper layer is <pod root>/upper
# at <pod root>/merged, with /dev, /proc and /sys, the pod's volumes (MLENV_KUBE_MOUNTS,
# "dest=src" lines), its namespace's names file's folder read-only at /run/kube-tier
# (MLENV_KUBE_NAMES), the tier's folder hidden, and the host's home folders and /tmp
# empty (opaque folders of the upper layer, made by the controller) but for the paths the
# "image" needs (MLENV_KUBE_IMAGE: the Python installation and the checkout, read-only).
# Then it records itself in <pod root>/rootns (pid, start time, the mount namespace's
# inode) and sleeps: every process of the pod (confine.sh) enters this namespace, so the
# container command, every exec and sshd's sessions see one root.
set -eu
PATH=/usr/sbin:/usr/bin:/sbin:/bin
tier=$1 root=$2 name=$3
case "$root" in
    "$tier"/pods/*/*) ;;
    *) echo "kube tier: pod root $root is not under $tier/pods: refusing" >&2; exit 126 ;;
esac
m=$root/merged
mkdir -p "$root/upper" "$root/work" "$m"
mount -t overlay overlay -o "lowerdir=/,upperdir=$root/upper,workdir=$root/work" "$m"
mount --rbind /dev "$m/dev"
mount --rbind /proc "$m/proc"
mount --rbind /sys "$m/sys"
# a container's own /dev/shm (the runtime's default size); a volume the pod mounts there
# (an emptyDir of medium Memory, as the product's pods have) is bound over it below
mount -t tmpfs -o size=64m,mode=1777 shm "$m/dev/shm"
printf '%s\n' "${MLENV_KUBE_IMAGE:-}" | while read -r path; do
    [ -n "$path" ] && [ -d "$path" ] || continue
    mkdir -p "$m$path"
    mount --rbind "$path" "$m$path"
    mount -o remount,bind,ro "$m$path"
done
# The tier's folder (keys, other pods), hidden where the pod would see it: under a
# folder the image brings back (the checkout holds .mlenv/), or where nothing hides it.
if [ -d "$m$tier" ]; then
    mount -t tmpfs -o size=64k,mode=0700 tier-hidden "$m$tier"
fi
printf '%s\n' "${MLENV_KUBE_MOUNTS:-}" | while IFS='=' read -r dest src; do
    [ -n "$dest" ] || continue
    case "$src" in "$tier"/*) ;; *) echo "kube tier: volume $src outside the tier: skipped" >&2; continue ;; esac
    # Resolved inside the pod's root: /var/run is a link to /run, and a link followed
    # from outside the chroot would land on the host's /run (read-only here, and not ours).
    chroot "$m" mkdir -p -- "$dest"
    real=$(chroot "$m" realpath -e -- "$dest")
    mount --bind "$src" "$m$real"
done
# The namespace's names file (the pod's /etc/hosts links to it), read-only: one pod
# cannot change the names the others see.
names=${MLENV_KUBE_NAMES:-}
case "$names" in
    "$tier"/pods/*/.names)
        mkdir -p "$names" "$m/run/kube-tier"
        mount --bind "$names" "$m/run/kube-tier"
        mount -o remount,bind,ro "$m/run/kube-tier" ;;
    "") ;;
    *) echo "kube tier: names folder $names outside the tier: skipped" >&2 ;;
esac
hostname "$name"
started=$(cut -d')' -f2- "/proc/$$/stat" | awk '{print $20}')
printf '%s %s %s\n' "$$" "$started" "$(stat -L -c %i /proc/self/ns/mnt)" > "$root/rootns.tmp"
mv "$root/rootns.tmp" "$root/rootns"
exec sleep infinity
