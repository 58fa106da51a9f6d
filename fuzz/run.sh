#!/bin/bash
# Build the fuzz targets and run them.
#
#   fuzz/run.sh [-t SECONDS] [-m] [TARGET...]      (default: every target, 30 s each)
#
# Builds with libFuzzer's coverage instrumentation on stable Rust (what `cargo fuzz build
# -s none` does; no nightly needed), then runs each target from its kept corpus
# (fuzz/corpus/TARGET) for SECONDS, with a 10 s limit per input and 2 GiB of memory. New
# inputs go to a scratch copy, so the tree is left as it was, unless -m: then the scratch
# corpus is merged (minimized) back into fuzz/corpus/TARGET, for a campaign to keep what
# it found. A crash, a timeout or running out of memory fails the script and names the
# input that did it (kept in fuzz/artifacts/TARGET/).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
secs=30
merge=
while getopts "t:m" o; do
	case $o in
	t) secs=$OPTARG ;;
	m) merge=1 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
all=(open_fsck mount_ops replay decode_superblock decode_descriptors decode_inode
	decode_extent decode_dir decode_xattr decode_inline decode_blockmap decode_jbd2 decode_quota)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

triple=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
# The targets only: the `seeds` tool links no libFuzzer, so no coverage callbacks.
(cd "$here" && cargo build -q --release --target "$triple" --target-dir "$here/target" \
	$(printf -- '--bin %s ' "${all[@]}"))
bin=$here/target/$triple/release

status=0
for t in "${targets[@]}"; do
	kept=$here/corpus/$t
	work=$(mktemp -d)
	mkdir -p "$kept" "$here/artifacts/$t"
	cp -r "$kept/." "$work/"
	log=$here/artifacts/$t/last.log
	if "$bin/$t" "$work" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
		-max_len=262144 -len_control=50 -print_final_stats=1 \
		-artifact_prefix="$here/artifacts/$t/" >"$log" 2>&1; then
		stats=$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -1)
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
		echo "fuzz $t: ${secs} s, $runs runs, $stats"
		if [ -n "$merge" ]; then
			"$bin/$t" -merge=1 "$kept" "$work" >/dev/null 2>&1
		fi
	else
		echo "fuzz $t: FAILED; see $log"
		grep -m1 -E "panicked at|ERROR: libFuzzer" -A2 "$log" || true
		grep -m1 "Test unit written to" "$log" || true
		status=1
	fi
	rm -rf "$work"
done
exit $status
