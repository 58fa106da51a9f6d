#!/bin/bash
# Compare `lanefs fsck` with `e2fsck -fn` on e2fsprogs' own test images.
#
#   scripts/e2fsprogs-images.sh E2FSPROGS_CHECKOUT [LANEFS_BINARY]
#
# Every tests/{f,j}_*/image.gz of an e2fsprogs checkout is unpacked and checked by both
# (60 s each at most); prints one line per image where they disagree on clean or not, or
# where lanefs fails with something other than a named refusal (exit 8), then a count.
# Disagreements are not all lanefs's: e2fsck -n exits 0 on problems it only offers to
# fix silently (group descriptor checksums, for one), and lanefs refuses what the kernel
# refuses (an extent tree deeper than 5). docs/fuzzing.md lists the last run's.
set -uo pipefail
src=${1:?usage: e2fsprogs-images.sh E2FSPROGS_CHECKOUT [LANEFS_BINARY]}
lanefs=${2:-lanefs}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0
differ=0
for gz in "$src"/tests/[fj]_*/image.gz; do
	name=$(basename "$(dirname "$gz")")
	gunzip -c "$gz" >"$work/img" 2>/dev/null || continue
	cp "$work/img" "$work/e2"
	timeout 60 e2fsck -fn "$work/e2" >/dev/null 2>&1
	e=$?
	timeout 60 "$lanefs" fsck "$work/img" >"$work/out" 2>&1
	l=$?
	n=$((n + 1))
	if [ $e -eq 124 ]; then
		continue # e2fsck itself loops on a few of them under -n
	fi
	if [ $l -gt 8 ] || { [ $l -eq 0 ] && [ $e -ne 0 ]; } || { [ $l -eq 4 ] && [ $e -eq 0 ]; }; then
		differ=$((differ + 1))
		echo "$name: e2fsck $e, lanefs $l: $(head -c 200 "$work/out" | tr '\n' ' ')"
	fi
done
echo "$n images, $differ disagreements"
