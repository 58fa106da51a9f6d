#!/usr/bin/env bash
# Build an image from host trees two ways, interleaved, and print each time and the
# medians: `mke2fs -t ext4 -d STAGE IMG` against `lanefs mkfs -d STAGE IMG`, and with -r
# also lanefs's reproducible build (SOURCE_DATE_EPOCH, -U, -E hash_seed).
#
#   sudo scripts/bench-mkfs-d.sh [-n REPS] [-s SIZE] [-r] [SRC...]
#        (defaults: 3, 4G, /usr/share/doc /usr/include)
#
# Needs root: the sources are bind-mounted side by side into one staging directory (both
# tools take one). Needs mke2fs and a release build of lanefs (built if missing). Both
# images live in $TMPDIR (default /tmp); the host page cache is warmed with one untimed
# read of the sources, and `sync` runs before each timed build. Each build ends with its
# data on the device (both flush before they exit).
set -euo pipefail
reps=3
size=4G
repro=
while getopts "n:s:r" o; do
  case $o in
    n) reps=$OPTARG ;;
    s) size=$OPTARG ;;
    r) repro=1 ;;
    *) echo "usage: $0 [-n REPS] [-s SIZE] [-r] [SRC...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
srcs=("$@")
[ ${#srcs[@]} -gt 0 ] || srcs=(/usr/share/doc /usr/include)
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/lanefs
[ -x "$bin" ] || (cd "$root" && cargo build --release -p lanefs-cli >&2)
work=$(mktemp -d)
stage=$work/stage
mkdir -p "$stage"
cleanup() {
  for d in "$stage"/*; do umount "$d" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
for s in "${srcs[@]}"; do
  d=$stage/$(basename "$s")
  mkdir -p "$d"
  mount --bind "$s" "$d"
done
echo "source: $(du -sh --apparent-size "${srcs[@]}" | awk '{print $1}' | paste -sd+) in $(find "$stage"/ | wc -l) names (${srcs[*]})"
tar -cf - -C "$stage" . 2>/dev/null | cat >/dev/null
now() { date +%s.%N; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
m_times=()
l_times=()
r_times=()
for r in $(seq 1 "$reps"); do
  rm -f "$work/m.img" "$work/l.img" "$work/r.img"
  truncate -s "$size" "$work/m.img"
  sync
  t0=$(now)
  mke2fs -q -F -t ext4 -d "$stage" "$work/m.img"
  t1=$(now)
  m_times+=("$(echo "$t1 - $t0" | bc)")
  sync
  t0=$(now)
  "$bin" mkfs -s "$size" -d "$stage" "$work/l.img" >/dev/null
  t1=$(now)
  l_times+=("$(echo "$t1 - $t0" | bc)")
  line=$(printf 'rep %d: mke2fs -d %.2f s, lanefs mkfs -d %.2f s' "$r" "${m_times[-1]}" "${l_times[-1]}")
  if [ -n "$repro" ]; then
    sync
    t0=$(now)
    SOURCE_DATE_EPOCH=1700000000 "$bin" mkfs -s "$size" -U 0f8e1c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b \
      -E hash_seed=11111111-2222-3333-4444-555555555555 -d "$stage" "$work/r.img" >/dev/null
    t1=$(now)
    r_times+=("$(echo "$t1 - $t0" | bc)")
    line+=$(printf ', reproducible %.2f s' "${r_times[-1]}")
  fi
  echo "$line"
done
m=$(median "${m_times[@]}")
l=$(median "${l_times[@]}")
printf 'median: mke2fs -d %.2f s, lanefs mkfs -d %.2f s: lanefs %.1fx faster\n' "$m" "$l" "$(echo "$m / $l" | bc -l)"
if [ -n "$repro" ]; then
  rr=$(median "${r_times[@]}")
  printf 'median: reproducible %.2f s: %.1fx faster than mke2fs -d\n' "$rr" "$(echo "$m / $rr" | bc -l)"
fi
e2fsck -fn "$work/l.img" >/dev/null && echo "e2fsck -fn: lanefs image clean"
