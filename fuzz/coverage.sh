#!/bin/bash
# Source coverage the kept corpus reaches, per target (what `cargo fuzz coverage` reports).
#
#   fuzz/coverage.sh [TARGET...]      (default: every target)
#
# Builds the targets with LLVM source coverage (-Cinstrument-coverage, stable Rust with the
# llvm-tools component), runs each once over every input of fuzz/corpus/TARGET
# (libFuzzer's -runs=0), and prints the line and region coverage of the lanefs crate's
# sources, with the corpus size. Profiles go to fuzz/coverage/TARGET/ (not kept).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
all=(open_fsck mount_ops replay decode_superblock decode_descriptors decode_inode
	decode_extent decode_dir decode_xattr decode_inline decode_blockmap decode_jbd2 decode_quota)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

sysroot=$(rustc --print sysroot)
triple=$(rustc -vV | sed -n 's/^host: //p')
tools=$sysroot/lib/rustlib/$triple/bin
[ -x "$tools/llvm-cov" ] || {
	echo "coverage: llvm-cov missing: rustup component add llvm-tools" >&2
	exit 2
}
export RUSTFLAGS="-Cinstrument-coverage --cfg fuzzing"
(cd "$here" && cargo build -q --release --target "$triple" --target-dir "$here/target-cov" \
	$(printf -- '--bin %s ' "${all[@]}"))
bin=$here/target-cov/$triple/release
src=$(cd "$here/../crates/lanefs/src" && pwd)

# The sources each target is for: its coverage there is the second pair of columns.
focus() {
	case $1 in
	open_fsck) echo fsck ;;
	mount_ops) echo fs dir page alloc ;;
	replay) echo journal ;;
	decode_superblock) echo disk/superblock.rs disk/geometry.rs ;;
	decode_descriptors) echo disk/group.rs ;;
	decode_*) echo "disk/${1#decode_}.rs" ;;
	esac
}

# The TOTAL line of llvm-cov's report over some sources: "lines regions" percentages.
cover() {
	local t=$1
	shift
	"$tools/llvm-cov" report "$bin/$t" -instr-profile="$here/coverage/$t/merged.profdata" \
		--ignore-filename-regex='(/\.cargo/|/rustc/|/vendor/|/fuzz/)' "$@" |
		tail -1 | awk '{print $10, $4}'
}

printf '%-20s %7s %9s | %-15s | %s\n' target inputs bytes "crate: lines reg" "focus: lines reg (sources)"
for t in "${targets[@]}"; do
	out=$here/coverage/$t
	rm -rf "$out"
	mkdir -p "$out"
	corpus=$here/corpus/$t
	LLVM_PROFILE_FILE="$out/%p-%m.profraw" "$bin/$t" "$corpus" -runs=0 -timeout=30 \
		-rss_limit_mb=2048 >"$out/run.log" 2>&1 || {
		echo "coverage $t: the corpus run failed; see $out/run.log"
		exit 1
	}
	"$tools/llvm-profdata" merge -sparse "$out"/*.profraw -o "$out/merged.profdata"
	read -r lines regions < <(cover "$t" "$src")
	paths=()
	for f in $(focus "$t"); do paths+=("$src/$f"); done
	read -r flines fregions < <(cover "$t" "${paths[@]}")
	n=$(find "$corpus" -type f | wc -l)
	bytes=$(du -sb "$corpus" | cut -f1)
	printf '%-20s %7s %9s | %7s %7s | %7s %7s (%s)\n' "$t" "$n" "$bytes" "$lines" "$regions" \
		"$flines" "$fregions" "$(focus "$t")"
	rm -f "$out"/*.profraw
done
