#!/usr/bin/env bash
# Issue 12's "cost flat as directories grow": mdtest's one-thread create and remove rates
# in a directory of BIG files against the same binary's rates at 2,000 files, alternated
# between the binaries given, and each big rate as a ratio of the small rate measured
# just after it (the goal is 0.6x).
#
#   scripts/bench-dirsize.sh [-n ALTERNATIONS] [-f BIG] [-s SIZE] [BIN...]
#       (defaults: 3, 2000000, 40G, target/release/lanefs)
#
# One rep at BIG files (`--size SIZE`: the image, whose journal is mke2fs's for that
# size, 256 MiB at 40G), the median of 9 at 2,000. This VM runs in a fast or a slow mode
# for minutes at a time (the 2,000-file rate of one binary moves by half between
# invocations), which is why each big run is paired with the small run right after it and
# binaries are alternated rather than run one after the other. Needs python3.
set -euo pipefail
alts=3
big=2000000
size=40G
while getopts "n:f:s:" o; do
  case $o in
    n) alts=$OPTARG ;;
    f) big=$OPTARG ;;
    s) size=$OPTARG ;;
    *) echo "usage: $0 [-n ALTERNATIONS] [-f BIG] [-s SIZE] [BIN...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
root=$(cd "$(dirname "$0")/.." && pwd)
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
  bins=("$root/target/release/lanefs")
  [ -x "${bins[0]}" ] || (cd "$root" && cargo build --release -p lanefs-cli >&2)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for a in $(seq "$alts"); do
  for i in "${!bins[@]}"; do
    b=${bins[$i]}
    "$b" bench mdtest --threads 1 --files "$big" --size "$size" --variants default --reps 1 \
      --json "$work/big.json" >/dev/null
    "$b" bench mdtest --threads 1 --files 2000 --variants default --reps 9 \
      --json "$work/small.json" >/dev/null
    python3 - "$a" "$b" "$big" "$work/big.json" "$work/small.json" <<'PY'
import json, statistics, sys
alt, binary, big, big_json, small_json = sys.argv[1:]
def rates(path):
    out = {}
    for r in json.load(open(path)):
        if r["workload"] == "mdtest":
            out.setdefault(r["phase"], []).append(r)
    return out
B, S = rates(big_json), rates(small_json)
cols = []
for phase in ("create", "remove"):
    b = B[phase][0]
    s = statistics.median(r["ops_per_sec"] for r in S[phase])
    cols.append(f"{phase} {b['ops_per_sec']:>9,.0f}/s ({b['journal_bytes_per_op']:,.0f} B/op)"
                f" vs {s:>9,.0f}/s = {b['ops_per_sec'] / s:.2f}x")
print(f"alt {alt} {binary} {int(big):,} files: " + " | ".join(cols), flush=True)
PY
  done
done
