#!/usr/bin/env bash
# Copy trees into a fresh ext4 image two ways, interleaved, and print each time and the
# medians: `lanefs cp -r SRC... IMG:/` against the kernel's `cp -a SRC... MNT/` into a
# loop mount of a mkfs.ext4 image plus `umount` (which writes everything back).
#
#   sudo scripts/bench-cp.sh [-n REPS] [-s SIZE] [SRC...]     (defaults: 3, 3G, /usr/share /usr/include)
#
# Needs root (loop mounts), mkfs.ext4 and a release build of lanefs (built if missing).
# Both images live in $TMPDIR (default /tmp), on the same disk; the host page cache is
# warmed with one untimed read of the sources first, so both read them from memory, and
# `sync` runs before each timed copy, so neither waits on the other's write-back. Each
# timed copy ends with its data on the device: umount for the kernel, lanefs's unmount
# (sync, then a device flush) for lanefs.
set -euo pipefail
reps=3
size=3G
while getopts "n:s:" o; do
  case $o in
    n) reps=$OPTARG ;;
    s) size=$OPTARG ;;
    *) echo "usage: $0 [-n REPS] [-s SIZE] [SRC...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
srcs=("$@")
[ ${#srcs[@]} -gt 0 ] || srcs=(/usr/share /usr/include)
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/lanefs
[ -x "$bin" ] || (cd "$root" && cargo build --release -p lanefs-cli >&2)
work=$(mktemp -d)
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() { umount "$mnt" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
du -sh --apparent-size "${srcs[@]}" | sed 's/^/source: /'
tar -cf - "${srcs[@]}" 2>/dev/null | cat >/dev/null
now() { date +%s.%N; }
lanefs_times=()
kernel_times=()
for r in $(seq 1 "$reps"); do
  rm -f "$work/k.img" "$work/l.img"
  truncate -s "$size" "$work/k.img"
  mkfs.ext4 -q -F "$work/k.img"
  sync
  t0=$(now)
  mount -o loop "$work/k.img" "$mnt"
  cp -a "${srcs[@]}" "$mnt/"
  umount "$mnt"
  t1=$(now)
  kernel_times+=("$(echo "$t1 - $t0" | bc)")
  "$bin" mkfs "$work/l.img" --size "$size" >/dev/null
  sync
  t0=$(now)
  "$bin" cp -r "${srcs[@]}" "$work/l.img:/"
  t1=$(now)
  lanefs_times+=("$(echo "$t1 - $t0" | bc)")
  printf 'rep %d: kernel cp -a + umount %.2f s, lanefs cp -r %.2f s\n' "$r" "${kernel_times[-1]}" "${lanefs_times[-1]}"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
k=$(median "${kernel_times[@]}")
l=$(median "${lanefs_times[@]}")
printf 'median: kernel %.2f s, lanefs %.2f s, lanefs/kernel %.2f\n' "$k" "$l" "$(echo "$l / $k" | bc -l)"
