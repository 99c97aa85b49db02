#!/bin/sh
# ckpt-tree.sh: a checkpoint command (RAILOVER_CHECKPOINT_CMD) for MPI jobs
# with several ranks per host, all children of one mpirun or orted: the
# tree is imaged once per checkpoint, by the last of its ranks to arrive,
# and the others wait for that dump, so that every rank of the tree is in
# its checkpoint wait (control endpoints closed) when it is frozen.
#
#   RAILOVER_CHECKPOINT_CMD='ckpt-tree.sh %p %d CRIU_DUMP_OPTION...'
#
# The rank count comes from the rank's environment (Open MPI's
# OMPI_COMM_WORLD_LOCAL_SIZE, which the command inherits); the images go to
# <image directory's parent>/tree.<root pid>; the exit status is the
# dump's, for every rank of the tree.  Coordination files:
# /tmp/railover-ckpt.<root pid>.{lock,arrived,done}.
set -u
pid=${1:?usage: ckpt-tree.sh PID IMAGE_DIR CRIU_DUMP_OPTION...} dir=${2:?}
shift 2
root=$(ps -o ppid= -p "$pid" | tr -d ' ')
[ -n "$root" ] || { echo "ckpt-tree: no process $pid" >&2; exit 1; }
n=${OMPI_COMM_WORLD_LOCAL_SIZE:-1}
base=/tmp/railover-ckpt.$root
img=${dir%/*}/tree.$root
before=$(stat -c %Y.%i "$base.done" 2> /dev/null || echo none)
exec 9>> "$base.lock"
flock 9
echo "$pid" >> "$base.arrived"
count=$(wc -l < "$base.arrived")
[ "$count" -ge "$n" ] && rm -f "$base.arrived"
flock -u 9
if [ "$count" -ge "$n" ]; then
    mkdir -p "$img" || exit 1
    echo "ckpt-tree: rank pid $pid, last of $n, dumps tree $root into $img"
    criu dump -t "$root" -D "$img" "$@"
    rc=$?
    echo "$rc" > "$base.done.tmp" && mv "$base.done.tmp" "$base.done"
    exit $rc
fi
echo "ckpt-tree: rank pid $pid, $count of $n, waits for the dump of tree $root"
while [ "$(stat -c %Y.%i "$base.done" 2> /dev/null || echo none)" = "$before" ]; do
    sleep 0.2
done
exit "$(cat "$base.done")"
