#!/bin/sh
# criu-action.sh: a CRIU action script (criu dump|restore --action-script)
# for restarting a process tree that a checkpoint left running and that was
# killed later, such as an MPI job's mpirun or orted tree: what the tree
# needs besides its images.
#
# Files.  CRIU images a regular file by its path, size and position, and a
# file-backed MAP_SHARED mapping by its path only (not its pages): a
# restore needs the file at the same path with the same size, and its
# content is whatever the file holds then.  An MPI job's tree has such
# files: Open MPI's session directory (/tmp/ompi.<host>.<uid>/...: the PMIx
# data store that the server and the ranks map shared, hwloc's topology,
# the debugger FIFO), a shared-memory BTL's segments (/dev/shm), mpirun's
# output files, which the job wrote on after the checkpoint.
#
# TCP.  The job's TCP connections (mpirun <-> orted on the network, PMIx on
# loopback) are imaged with --tcp-established.  A dump that leaves the tree
# running (--leave-running) lifts its network lock when it ends, so the
# restore finds none; and the killed tree's sockets linger (TIME_WAIT,
# FIN_WAIT, ...) on its ports, which keeps a listener from being bound
# again ("Can't bind inet socket ... Address already in use").
#
#   post-dump    (the tasks are still frozen and the network locked:
#                criu/cr-dump.c's cr_dump_finish() runs it before it resumes
#                them) saves every regular file that a task of the tree
#                (CRTOOLS_INIT_PID and its descendants) has open or maps
#                shared, and every FIFO it has open, under the directories
#                of ROV_CKPT_FILES (colon-separated, default /tmp:/dev/shm),
#                into the image directory as ckpt-files.tar (list:
#                ckpt-files.txt), and the local ports of the tree's TCP
#                sockets as ckpt-tcp-ports.txt;
#   pre-restore  destroys what is left on those ports (ss -K), blocks them
#                (nftables table inet railover-restore: nothing in or out,
#                so a restored end sends nothing to a peer whose end is
#                not restored yet: the peer's kernel would reset it), and
#                puts the files back with the checkpoint's content and size.
#
# Whoever restores the job deletes the table once every tree of the job is
# restored: `nft delete table inet railover-restore` on each host.  Absolute
# paths are kept (tar -P): restore where they mean the same files.
set -eu
dir=${CRTOOLS_IMAGE_DIR:?not run by CRIU (no CRTOOLS_IMAGE_DIR)}
lock=railover-restore

case ${CRTOOLS_SCRIPT_ACTION:-} in
post-dump)
    : "${CRTOOLS_INIT_PID:?no CRTOOLS_INIT_PID}"
    # The tree, breadth first, from the kernel's children lists.
    pids=$CRTOOLS_INIT_PID todo=$CRTOOLS_INIT_PID
    while [ -n "$todo" ]; do
        next=
        for p in $todo; do
            for c in $(cat /proc/"$p"/task/*/children 2> /dev/null); do
                pids="$pids $c" next="$next $c"
            done
        done
        todo=$next
    done
    list=$dir/ckpt-files.txt
    : > "$list"
    for p in $pids; do
        # (one process per task: a fork costs up to 0.5 s under TCG, and
        # the tree stays frozen until this script ends)
        find /proc/"$p"/fd -mindepth 1 -printf '%l\n' 2> /dev/null || :
        awk 'substr($2, 4, 1) == "s" && $6 ~ /^\// && NF == 6 { print $6 }' /proc/"$p"/maps
    done | sort -u | while IFS= read -r f; do
        [ -f "$f" ] || [ -p "$f" ] || continue
        old_ifs=$IFS IFS=:
        for top in ${ROV_CKPT_FILES:-/tmp:/dev/shm}; do
            case $f in "${top%/}"/*) printf '%s\n' "$f" >> "$list" ;; esac
        done
        IFS=$old_ifs
    done
    # (sparse: PMIx's data store segments are 4 MiB files, mostly holes)
    tar -cSPf "$dir/ckpt-files.tar" -T "$list"
    ss -tanpH | awk -v re="pid=($(echo $pids | tr ' ' '|'))," \
        '$0 ~ re { sub(/.*:/, "", $4); print $4 }' | sort -u > "$dir/ckpt-tcp-ports.txt"
    ;;
pre-restore)
    ports=$(cat "$dir/ckpt-tcp-ports.txt" 2> /dev/null || :)
    if [ -n "$ports" ]; then
        set=$(echo $ports | tr ' ' ',') filter=
        for p in $ports; do
            filter="$filter${filter:+ or }sport = :$p or dport = :$p"
        done
        ss -K -tanH state all "( $filter )" > /dev/null
        nft -f - << EOF
table inet $lock
delete table inet $lock
table inet $lock {
    chain in { type filter hook input priority -150; tcp dport { $set } drop; }
    chain out { type filter hook output priority -150; tcp sport { $set } drop; }
}
EOF
        echo "criu-action: ports $set: sockets left destroyed, blocked until 'nft delete table inet $lock'"
    fi
    if [ -e "$dir/ckpt-files.tar" ]; then
        tar -xPf "$dir/ckpt-files.tar"
        echo "criu-action: put back $(wc -l < "$dir/ckpt-files.txt") files"
    fi
    ;;
esac
exit 0
