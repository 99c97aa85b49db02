#!/usr/bin/env bash
# Build the initramfs of the Soft-RoCE test VMs (tests/vm/README.md).
#
#   build-initrd.sh OUTDIR
#
# Picks the newest installed kernel /boot/vmlinuz-<ver> whose
# /lib/modules/<ver> has the Soft-RoCE driver (rdma_rxe) and writes
#   OUTDIR/initrd.gz   busybox-static, tests/vm/init as /init, and the few
#                      modules needed to mount 9p over virtio-pci
#   OUTDIR/kernel      one line: the path of the vmlinuz the initrd is for
#   OUTDIR/stamp       what the build was made from (the cache key)
# Everything else the guest needs (rdma_rxe, virtio_net, ...) is modprobe'd
# inside the guest from the host's /lib/modules, seen through 9p.
#
# Cached: nothing is rebuilt while the kernel, its modules, busybox, init and
# this script are unchanged.  Safe to run concurrently (flock on OUTDIR).
# Exit status: 0 ok; 77 no usable kernel or no static busybox (callers report
# a skip); 1 any other error.
set -euo pipefail
shopt -s nullglob
PATH=$PATH:/usr/sbin:/sbin                  # modprobe for non-root users

here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
prog=build-initrd.sh
die()  { echo "$prog: $*" >&2; exit 1; }
skip() { echo "$prog: $*" >&2; exit 77; }

[[ $# -eq 1 ]] || { echo "usage: $prog OUTDIR" >&2; exit 2; }
mkdir -p -- "$1"
out=$(cd -- "$1" && pwd -P)

# --- inputs ---------------------------------------------------------------
# The kernel: newest version first; it must be readable and come with a
# depmod'ed module tree that contains rxe.
kernel='' kver=''
while IFS= read -r k; do
  v=${k#/boot/vmlinuz-}
  if [[ -r $k && -r /lib/modules/$v/modules.dep &&
        -d /lib/modules/$v/kernel/drivers/infiniband/sw/rxe ]]; then
    kernel=$k kver=$v
    break
  fi
done < <(printf '%s\n' /boot/vmlinuz-* | sort -rV)
[[ -n $kernel ]] || skip "no usable guest kernel: need a readable /boot/vmlinuz-<ver> with
  /lib/modules/<ver>/kernel/drivers/infiniband/sw/rxe (Debian: apt-get install linux-image-amd64)"

# busybox must be static: the initramfs has no C library.
bb=$(command -v busybox || true)
[[ -n $bb ]] || skip "busybox not found (Debian: apt-get install busybox-static)"
bb=$(readlink -f "$bb")
if ldd "$bb" >/dev/null 2>&1; then
  skip "$bb is dynamically linked; the initramfs needs busybox-static"
fi
command -v cpio >/dev/null || die "cpio not found (apt-get install cpio)"
command -v modprobe >/dev/null || die "modprobe not found (apt-get install kmod)"

# The modules that mount the host root over virtio-9p, dependencies first.
# (modprobe takes one module per call: further words are module parameters.)
mods=()
while IFS= read -r f; do mods+=("$f"); done < <(
  for m in virtio_pci 9p 9pnet_virtio; do
    modprobe -S "$kver" --show-depends "$m" || echo "MISSING $m"
  done | awk '$1 == "MISSING" { print; next } $1 == "insmod" && !seen[$2]++ { print $2 }')
for f in "${mods[@]}"; do
  [[ $f != MISSING* ]] || die "kernel $kver has no module ${f#MISSING }"
done

# --- cache check ------------------------------------------------------------
stamp=$(
  echo "kernel $kernel"
  stat -L -c '%n %s %Y' "$kernel" "$bb" "${mods[@]}"
  sha256sum "$here/init" "$here/$prog"
)
exec 9>"$out/.lock"
flock 9
if [[ -s $out/initrd.gz && -s $out/kernel && -r $out/stamp &&
      $(< "$out/stamp") == "$stamp" ]]; then
  exit 0                                   # up to date
fi

# --- build ------------------------------------------------------------------
work=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf -- "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,lib/modules,proc,sys,dev,host,vmout}
cp "$bb" "$root/bin/busybox"
for f in "${mods[@]}"; do
  name=$(basename "$f")
  case $f in                   # insmod wants plain .ko files
    *.ko.xz)  xz -dc "$f" > "$root/lib/modules/${name%.xz}"; name=${name%.xz} ;;
    *.ko.zst) zstd -qdc "$f" > "$root/lib/modules/${name%.zst}"; name=${name%.zst} ;;
    *.ko.gz)  gzip -dc "$f" > "$root/lib/modules/${name%.gz}"; name=${name%.gz} ;;
    *)        cp "$f" "$root/lib/modules/$name" ;;
  esac
  echo "/lib/modules/$name"
done > "$root/lib/modules/order"
install -m 0755 "$here/init" "$root/init"
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -1) > "$work/initrd.gz"

mv -f "$work/initrd.gz" "$out/initrd.gz"
echo "$kernel" > "$out/kernel"
echo "$stamp" > "$out/stamp"                # last: marks the build complete
echo "$prog: built $out/initrd.gz ($(wc -c < "$out/initrd.gz") bytes) for $kernel" >&2
