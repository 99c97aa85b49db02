#!/bin/sh
# ckpt-files.sh: a CRIU action script (criu dump|restore --action-script)
# that keeps the files a process tree has open or maps shared, as they were
# at the checkpoint, and puts them back before a restore.
#
# CRIU images a regular file by its path, size and position, and a
# file-backed MAP_SHARED mapping by its path only (not its pages): a
# restore needs the file at the same path with the same size, and its
# content is whatever the file holds then.  An MPI job's tree has such
# files: Open MPI's session directory (/tmp/ompi.<host>.<uid>/..., the PMIx
# data store the ranks map shared), a shared-memory BTL's segments
# (/dev/shm), mpirun's output files, which the job wrote on after the
# checkpoint.  So:
#
#   post-dump    (the tasks are still frozen and the network locked: the
#                criu/cr-dump.c cr_dump_finish() runs it before it resumes
#                them) saves every regular file that a task of the tree
#                (CRTOOLS_INIT_PID and its descendants) has open or maps
#                shared, under the directories of ROV_CKPT_FILES
#                (colon-separated, default /tmp:/dev/shm), into the image
#                directory as ckpt-files.tar, and its list as ckpt-files.txt;
#   pre-restore  extracts it: the files come back with the checkpoint's
#                content and size, at their paths (directories made).
#
# Other actions: nothing.  Absolute paths are kept (tar -P): restore on a
# host where those paths mean the same files.
set -eu
dir=${CRTOOLS_IMAGE_DIR:?not run by CRIU (no CRTOOLS_IMAGE_DIR)}

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
        # open descriptors, then the shared file mappings (perms "rw-s")
        for fd in /proc/"$p"/fd/*; do
            readlink "$fd" 2> /dev/null || :
        done
        awk 'substr($2, 4, 1) == "s" && $6 ~ /^\// && NF == 6 { print $6 }' /proc/"$p"/maps
    done | sort -u | while IFS= read -r f; do
        [ -f "$f" ] || continue
        old_ifs=$IFS IFS=:
        for top in ${ROV_CKPT_FILES:-/tmp:/dev/shm}; do
            case $f in "${top%/}"/*) printf '%s\n' "$f" >> "$list" ;; esac
        done
        IFS=$old_ifs
    done
    tar -cPf "$dir/ckpt-files.tar" -T "$list"
    echo "ckpt-files: saved $(wc -l < "$list") files of tree $CRTOOLS_INIT_PID ($(echo $pids | wc -w) tasks):"
    sed 's/^/  /' "$list"
    ;;
pre-restore)
    if [ -e "$dir/ckpt-files.tar" ]; then
        tar -xPf "$dir/ckpt-files.tar"
        echo "ckpt-files: put back $(wc -l < "$dir/ckpt-files.txt") files"
    fi
    ;;
esac
exit 0
