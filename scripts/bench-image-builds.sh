#!/usr/bin/env bash
# Image builds against their anchors, interleaved (anchor, lanefs, anchor, lanefs, ... REPS
# times, each on a fresh output file), printing each time, the checks and a markdown table
# of the commands, medians and ratios. Four comparisons (rows):
#
#   tar     an image from a tar archive of TREE: `mke2fs -d ARCHIVE.tar` (e2fsprogs 1.47.4)
#           against `lanefs mkfs -d ARCHIVE.tar`; both images are loop-mounted and read
#           back against the extracted archive (diff -r; type, owner, group, mode, links,
#           size, mtime and symlink target of every name)
#   min     the smallest image of TREE: `mke2fs -d` into a MIN_SIZE image then
#           `resize2fs -M` (timed together) against `lanefs mkfs --size min -d`; sizes
#           compared, lanefs's image read back, both `e2fsck -fn`. resize2fs keeps the
#           first image's journal (mke2fs sizes it from MIN_SIZE: 32 MiB from 1G, 64 MiB
#           from 2G, 128 MiB from 16G) and inodes per group, so its result grows with
#           MIN_SIZE
#   root    a root-owned image of a user's tree, as that user (BENCH_USER, with setpriv):
#           `fakeroot mke2fs -d` against `lanefs mkfs --all-root -d`; the two images'
#           owners, modes and contents compared, every owner 0:0
#   sparse  a SPARSE_SIZE Android sparse image of SPARSE_TREE: plain `lanefs mkfs` then
#           `img2simg` (timed together; the plain build alone is reported too) against
#           `lanefs mkfs --sparse-output`, all reproducible (SOURCE_DATE_EPOCH, -U, -E
#           hash_seed); `simg2img` of the sparse file must give the plain build's bytes
#
#   sudo scripts/bench-image-builds.sh [--rows tar,min,root,sparse] [-n REPS] [--work DIR]
#        [--tree "DIR..."] [--sparse-tree "DIR..."] [--size SIZE] [--min-size SIZE]
#        [--sparse-size SIZE] [--user USER] [--fresh]
#
# Defaults (each also read from the environment): ROWS=tar,min,root,sparse, REPS=5,
# BENCH_WORK=/tmp/bench-image-builds, TREE="/usr/share /usr/include",
# SPARSE_TREE="/usr/share/doc /usr/share/locale" (about 300 MB on Debian 12), SIZE=4G
# (the tar and root images), MIN_SIZE=SIZE, SPARSE_SIZE=4G, BENCH_USER=lanefs-a.
# E2FSPROGS_PREFIX (default /opt/e2fsprogs-1.47.4: e2fsprogs 1.47.1 or later with libarchive)
# gives mke2fs, resize2fs, e2fsck and dumpe2fs; LANEFS_BIN (default
# target/release/lanefs, built if missing) is copied into the work directory first, so
# a rebuild during the run does not change it. Rows not asked for are not run: leave out
# a row whose lanefs feature is not there yet (its failure would be reported as such).
#
# Needs root (loop mounts, a tree owned by BENCH_USER), fakeroot, img2simg and simg2img
# (Debian: fakeroot, android-sdk-libsparse-utils). The inputs are made in the work
# directory once and kept (--fresh makes them again): ARCHIVE.tar (usr.tar) = `tar -C /
# -cf` of TREE, each parent directory first as an entry of its own (mke2fs's tar reader
# fails on a name whose directory the archive has not made); tree/ = the archive
# extracted by root; user-tree/ = the archive extracted by BENCH_USER (its files);
# sparse-tree/ = a copy of SPARSE_TREE. With the defaults they take about 2 GB, and the
# images of one row up to 3 GB more (a row's images are removed after its checks unless
# KEEP_IMAGES=1; logs/ keeps every command's output).
#
# The page cache is not dropped: each row reads its source once, untimed, before its
# first timed build, and `sync` runs before every timed command (both tools flush their
# image before they exit). mke2fs runs with MKE2FS_CONFIG set to Debian 12's
# mke2fs.conf (written into the work directory), whose ext4 features lanefs mkfs takes
# by default (upstream's 1.47.4 file adds metadata_csum_seed and orphan_file); `dumpe2fs
# -h` of both outputs is compared once a row. A command that fails is reported with its
# exit status and output, and that side of the row gets no time (and is not run again).
# The checks run once a row, untimed, on the last repetition's images.
set -euo pipefail

rows=${ROWS:-tar,min,root,sparse}
reps=${REPS:-5}
work=${BENCH_WORK:-/tmp/bench-image-builds}
tree_dirs=${TREE:-/usr/share /usr/include}
sparse_dirs=${SPARSE_TREE:-/usr/share/doc /usr/share/locale}
size=${SIZE:-4G}
min_size=${MIN_SIZE:-}
sparse_size=${SPARSE_SIZE:-4G}
user=${BENCH_USER:-lanefs-a}
fresh=
usage() {
  sed -n '/^#   sudo/,/^#$/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^$/d' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --rows) rows=$2; shift 2 ;;
    -n | --reps) reps=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --tree) tree_dirs=$2; shift 2 ;;
    --sparse-tree) sparse_dirs=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --min-size) min_size=$2; shift 2 ;;
    --sparse-size) sparse_size=$2; shift 2 ;;
    --user) user=$2; shift 2 ;;
    --fresh) fresh=1; shift ;;
    -h | --help) usage ;;
    *) echo "bench-image-builds: unknown argument $1" >&2; usage ;;
  esac
done
die() { echo "bench-image-builds: $*" >&2; exit 1; }
min_size=${min_size:-$size}
[ "$(id -u)" -eq 0 ] || die "needs root (loop mounts, a tree owned by $user)"
case $reps in '' | *[!0-9]* | 0) die "REPS must be a positive number, not '$reps'" ;; esac
for r in ${rows//,/ }; do
  case $r in tar | min | root | sparse) ;; *) die "unknown row '$r' (rows: tar,min,root,sparse)" ;; esac
done
has_row() { case ",$rows," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
uid=$(id -u "$user" 2>/dev/null) || die "no user $user (--user)"
gid=$(id -g "$user")
read -r -a tree_list <<<"$tree_dirs"
read -r -a sparse_list <<<"$sparse_dirs"
for d in "${tree_list[@]}" "${sparse_list[@]}"; do
  case $d in /?*) [ -d "$d" ] || die "$d: not a directory" ;; *) die "$d: give absolute paths" ;; esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${E2FSPROGS_PREFIX:-/opt/e2fsprogs-1.47.4}
mke2fs=$prefix/sbin/mke2fs
resize2fs=$prefix/sbin/resize2fs
e2fsck=$prefix/sbin/e2fsck
dumpe2fs=$prefix/sbin/dumpe2fs
[ -x "$mke2fs" ] || die "$mke2fs missing: set E2FSPROGS_PREFIX to an e2fsprogs 1.47.1+ install with libarchive"
mke2fs_version=$("$mke2fs" -V 2>&1 | sed -n 1p)
case $mke2fs_version in
  "mke2fs 1.47.4 "*) ;;
  *) echo "bench-image-builds: note: $mke2fs is not 1.47.4 but: $mke2fs_version" >&2 ;;
esac
need=(bc tar setpriv)
has_row root && need+=(fakeroot)
has_row sparse && need+=(img2simg simg2img)
for c in "${need[@]}"; do command -v "$c" >/dev/null || die "$c not found"; done

src_bin=${LANEFS_BIN:-$root/target/release/lanefs}
if [ ! -x "$src_bin" ]; then
  [ -z "${LANEFS_BIN:-}" ] || die "LANEFS_BIN=$LANEFS_BIN is not executable"
  echo "building lanefs (cargo build --release -p lanefs-cli) ..." >&2
  (cd "$root" && cargo build --release -p lanefs-cli >&2)
fi

mkdir -p "$work"
chmod 755 "$work"
cd "$work"
mkdir -p bin out logs mnt
cp "$src_bin" bin/lanefs
lanefs=$work/bin/lanefs
chmod 755 bin bin/lanefs
mkdir -p out/user
chown "$uid:$gid" out/user
chmod 755 out/user

# Debian 12's /etc/mke2fs.conf (e2fsprogs 1.47.0-2), what lanefs mkfs follows.
cat >mke2fs.conf <<'EOF'
[defaults]
	base_features = sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr
	default_mntopts = acl,user_xattr
	enable_periodic_fsck = 0
	blocksize = 4096
	inode_size = 256
	inode_ratio = 16384

[fs_types]
	ext3 = {
		features = has_journal
	}
	ext4 = {
		features = has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,extra_isize
	}
	small = {
		blocksize = 1024
		inode_ratio = 4096
	}
	floppy = {
		blocksize = 1024
		inode_ratio = 8192
	}
	big = {
		inode_ratio = 32768
	}
	huge = {
		inode_ratio = 65536
	}
	news = {
		inode_ratio = 4096
	}
	largefile = {
		inode_ratio = 1048576
		blocksize = -1
	}
	largefile4 = {
		inode_ratio = 4194304
		blocksize = -1
	}
	hurd = {
	     blocksize = 4096
	     inode_size = 128
	     warn_y2038_dates = 0
	}
EOF
export MKE2FS_CONFIG=$work/mke2fs.conf

mounted=()
cleanup() {
  local m
  for m in ${mounted[@]+"${mounted[@]}"}; do umount "$m" 2>/dev/null || true; done
}
trap cleanup EXIT

as_user() { setpriv --reuid "$uid" --regid "$gid" --init-groups -- "$@"; }
now() { date +%s.%N; }
# Median and range of the arguments: "MEDIAN s (MIN-MAX)".
stats() {
  printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {
    m = (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2
    printf "%.2f s (%.2f-%.2f)", m, a[1], a[NR] }'
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# A command as the table shows it: the binaries by their short names, paths relative to
# the work directory (every command runs there).
show() {
  local a s=
  for a in "$@"; do
    case $a in
      "$mke2fs") a=mke2fs ;;
      "$resize2fs") a=resize2fs ;;
      "$lanefs") a=lanefs ;;
    esac
    s+="${s:+ }$(printf '%q' "$a")"
  done
  printf '%s' "$s"
}
bytes() { stat -c %s "$1"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
# The names under a directory, one a line, sorted: type, path, owner, group, mode, links,
# size (not for directories, whose sizes are each builder's), mtime, symlink target. The
# root and lost+found are left out (a tar archive has no entry for the root).
listing() {
  (cd "$1" && find . -mindepth 1 -path ./lost+found -prune -o -printf '%y %p %U %G %m %n %s %T@ %l\n' |
    awk '$1 == "d" { $7 = "-" } { print }' | LC_ALL=C sort)
}
mount_ro() {
  mkdir -p "$2"
  mount -o ro,loop "$1" "$2"
  mounted+=("$2")
}
unmount() {
  umount "$1"
  local keep=() m
  for m in "${mounted[@]}"; do [ "$m" = "$1" ] || keep+=("$m"); done
  mounted=(${keep[@]+"${keep[@]}"})
}
# compare_trees A B NAME: diff -r and the listings; prints one verdict line, the first
# differences below it; returns 1 when they differ.
compare_trees() {
  local a=$1 b=$2 name=$3 ok=0
  listing "$a" >"logs/$name.a.list"
  listing "$b" >"logs/$name.b.list"
  if ! diff -r --no-dereference -x lost+found "$a" "$b" >"logs/$name.diff-r" 2>&1; then ok=1; fi
  if ! diff "logs/$name.a.list" "logs/$name.b.list" >"logs/$name.diff-list"; then ok=1; fi
  if [ $ok -eq 0 ]; then
    echo "  $name: same tree ($(wc -l <"logs/$name.a.list") names: contents, types, owners, modes, links, sizes, mtimes, symlinks)"
  else
    echo "  $name: DIFFERENT (logs/$name.diff-r, logs/$name.diff-list):"
    head -n 10 "logs/$name.diff-r" "logs/$name.diff-list" | sed 's/^/    /'
  fi
  return $ok
}
# dumpe2fs -h of two images, without what is random or a time, one diff.
compare_super() {
  local f
  for f in "$1" "$2"; do
    "$dumpe2fs" -h "$f" 2>/dev/null | grep -v -E '^(Filesystem UUID|Directory Hash Seed|Filesystem created|Last mount time|Last write time|Last checked|Mount count|Checksum|Journal checksum|Lifetime writes|Journal sequence):' >"$f.super" || true
  done
  if diff "$1.super" "$2.super" >"logs/$3.super-diff"; then
    echo "  dumpe2fs -h: the same but for UUIDs, hash seeds, times and checksums"
  else
    echo "  dumpe2fs -h differences ('<' $1, '>' $2):"
    grep '^[<>]' "logs/$3.super-diff" | sed 's/^/    /'
  fi
}
# The images go once a row's checks are done, unless KEEP_IMAGES=1.
drop() { [ "${KEEP_IMAGES:-0}" = 1 ] || rm -f "$@" "${@/%/.super}"; }
fsck_line() {
  if "$e2fsck" -fn "$1" >"logs/$2.e2fsck" 2>&1; then
    echo "  e2fsck -fn $1: clean"
  else
    echo "  e2fsck -fn $1: NOT CLEAN (logs/$2.e2fsck):"
    tail -n 5 "logs/$2.e2fsck" | sed 's/^/    /'
  fi
}
# Untimed: read a source once so every repetition finds it in the page cache.
warm() {
  local p
  for p in "$@"; do
    if [ -d "$p" ]; then tar -C "$p" -cf - . | cat >/dev/null; else cat "$p" >/dev/null; fi
  done
}

# timed LOG CMD...: sync, then run CMD with its output in LOG; T is the elapsed time.
T=
timed() {
  local log=$1 t0 t1 rc=0
  shift
  sync
  t0=$(now)
  "$@" >"$log" 2>&1 || rc=$?
  t1=$(now)
  T=$(echo "$t1 - $t0" | bc)
  return $rc
}
failed() { # failed LABEL RC LOG COMMAND-AS-SHOWN
  echo "  rep $r: FAILED: $1 (exit $2): $4"
  sed 's/^/    | /' "$3" | tail -n 8
}

table=()
add_row() { table+=("| $1 | $2 | $3 | $4 | $5 | $6 | $7 | $8 |"); }
code() { printf '\x60%s\x60' "$(show "$@")"; }
ratio() { echo "scale=4; $1 / $2" | bc; }
# anchor time / lanefs time as "N.Nx faster" (or "N.Nx slower" below 1).
fmt_x() { if ge "$1" 1; then printf '%.1fx faster' "$1"; else printf '%.1fx slower' "$(echo "1 / $1" | bc -l)"; fi; }
ge() { [ "$(echo "$1 >= $2" | bc -l)" = 1 ]; }

# ---- inputs -----------------------------------------------------------------------
# want NAME SOURCES...: 0 if NAME is missing or was made from other sources.
want() {
  local name=$1
  shift
  [ -z "$fresh" ] && [ -e "$name" ] && [ "$(cat "$name.src" 2>/dev/null)" = "$*" ] && return 1
  rm -rf "$name" "$name.src"
  return 0
}
made() { local name=$1; shift; echo "$*" >"$name.src"; }
archive=usr.tar
if has_row tar || has_row min || has_row root; then
  if want "$archive" "${tree_list[@]}"; then
    # The parents of each directory first, as entries of their own: mke2fs's tar reader
    # looks a name's directory up and fails when the archive has not made it.
    parents=()
    for d in "${tree_list[@]}"; do
      p=${d#/}
      while [ "$p" != "${p%/*}" ]; do
        p=${p%/*}
        parents=("$p" ${parents[@]+"${parents[@]}"})
      done
    done
    mapfile -t parents < <(printf '%s\n' ${parents[@]+"${parents[@]}"} | awk 'NF && !seen[$0]++')
    rel=()
    for d in "${tree_list[@]}"; do rel+=("${d#/}"); done
    echo "making $work/$archive from ${tree_list[*]} ..." >&2
    tar -C / -cf "$archive.tmp" --no-recursion ${parents[@]+"${parents[@]}"} --recursion "${rel[@]}"
    mv "$archive.tmp" "$archive"
    made "$archive" "${tree_list[@]}"
    rm -rf tree user-tree tree.src user-tree.src
  fi
fi
if has_row tar || has_row min; then
  if want tree "${tree_list[@]}"; then
    mkdir tree
    tar -C tree -xpf "$archive" --same-owner --numeric-owner
    made tree "${tree_list[@]}"
  fi
fi
if has_row root; then
  if want user-tree "${tree_list[@]}"; then
    mkdir user-tree
    chown "$uid:$gid" user-tree
    as_user tar -C user-tree -xpf "$archive"
    made user-tree "${tree_list[@]}"
  fi
  unreadable=$(as_user find user-tree ! -type l ! -readable 2>&1 | sed -n 1,5p)
  [ -z "$unreadable" ] || die "user-tree: not all readable by $user: $unreadable"
fi
if has_row sparse; then
  if want sparse-tree "${sparse_list[@]}"; then
    mkdir sparse-tree
    rel=()
    for d in "${sparse_list[@]}"; do rel+=("${d#/}"); done
    tar -C / -cf - "${rel[@]}" | tar -C sparse-tree -xpf - --same-owner --numeric-owner
    made sparse-tree "${sparse_list[@]}"
  fi
fi
describe() { # a directory or archive: bytes of file data and names
  if [ -d "$1" ]; then
    printf '%s MB in %s names' "$(du -s --apparent-size --block-size=1000000 "$1" | cut -f1)" "$(find "$1" -mindepth 1 | wc -l)"
  else
    printf '%s MB, %s entries' "$(($(bytes "$1") / 1000000))" "$(tar -tf "$1" | wc -l)"
  fi
}

echo "# image builds: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(uname -r)"
echo "lanefs: $src_bin ($(git -C "$root" describe --always --dirty 2>/dev/null || echo 'no git'), built $(date -u -r "$src_bin" +%Y-%m-%dT%H:%MZ))"
echo "mke2fs: $mke2fs ($mke2fs_version), MKE2FS_CONFIG=$MKE2FS_CONFIG (Debian 12's)"
echo "work directory: $work ($(df -T . | awk 'NR == 2 {print $2 " on " $1}')); $reps repetitions, interleaved; medians with (min-max)"
echo "page cache: not dropped; each row's source is read once, untimed, before its first build; sync before each timed command"
if has_row tar || has_row min || has_row root; then
  echo "TREE ${tree_list[*]}: $archive $(describe "$archive")"
fi
has_row sparse && echo "SPARSE_TREE ${sparse_list[*]}: sparse-tree/ $(describe sparse-tree)"

# ---- tar: an image from a tar archive ----------------------------------------------------
row_tar() {
  echo
  echo "## tar: $archive into a $size image"
  local a=out/tar-mke2fs.img b=out/tar-lanefs.img r
  local acmd=("$mke2fs" -q -F -t ext4 -d "$archive" "$a")
  local bcmd=("$lanefs" mkfs -s "$size" -d "$archive" "$b")
  local at=() bt=() afail='' bfail=''
  warm "$archive"
  for r in $(seq 1 "$reps"); do
    local line="  rep $r:"
    if [ -z "$afail" ]; then
      rm -f "$a"
      truncate -s "$size" "$a"
      if timed "logs/tar-mke2fs-$r.log" "${acmd[@]}"; then at+=("$T"); line+=" mke2fs $(printf %.2f "$T") s"
      else afail=$?; failed "mke2fs (anchor)" "$afail" "logs/tar-mke2fs-$r.log" "$(show "${acmd[@]}")"; fi
    fi
    if [ -z "$bfail" ]; then
      rm -f "$b"
      if timed "logs/tar-lanefs-$r.log" "${bcmd[@]}"; then bt+=("$T"); line+=", lanefs $(printf %.2f "$T") s"
      else bfail=$?; failed "lanefs" "$bfail" "logs/tar-lanefs-$r.log" "$(show "${bcmd[@]}")"; fi
    fi
    [ "$line" = "  rep $r:" ] || echo "$line"
  done
  local check="-" same=''
  echo " checks (untimed, last repetition's images, against tree/ = the archive extracted):"
  if [ -z "$afail" ]; then
    fsck_line "$a" tar-mke2fs
    mount_ro "$a" mnt/a
    compare_trees tree mnt/a tar-mke2fs || true
    unmount mnt/a
  fi
  if [ -z "$bfail" ]; then
    fsck_line "$b" tar-lanefs
    mount_ro "$b" mnt/b
    if compare_trees tree mnt/b tar-lanefs; then same=1; check="same tree read back"; else check="**tree differs**"; fi
    unmount mnt/b
    [ -n "$afail" ] || compare_super "$a" "$b" tar
  fi
  local am=- bm=- rt=- goal=-
  [ -n "$afail" ] && am="FAILED (exit $afail)" || am=$(stats "${at[@]}")
  [ -n "$bfail" ] && bm="FAILED (exit $bfail)" || bm=$(stats "${bt[@]}")
  if [ -z "$afail$bfail" ]; then
    local x
    x=$(ratio "$(median "${at[@]}")" "$(median "${bt[@]}")")
    rt="$(fmt_x "$x")"
    if ge "$x" 5 && [ -n "$same" ]; then goal="met"; else goal="not met"; fi
  fi
  add_row "tar archive of ${tree_list[*]} ($(describe "$archive")) into a $size image" \
    "$(code "${acmd[@]}") (a fresh $size file)" "$am" "$(code "${bcmd[@]}")" "$bm" "$rt" "≥5x faster, same tree: $goal" "$check"
  drop "$a" "$b"
}

# ---- min: the smallest image of a tree ----------------------------------------------------
min_anchor() { # mke2fs -d into a generous image, then resize2fs -M; T1 = mke2fs's part
  local t0
  t0=$(now)
  "$mke2fs" -q -F -t ext4 -d tree "$1" || return
  T1=$(echo "$(now) - $t0" | bc)
  "$resize2fs" -M "$1" || return
}
row_min() {
  echo
  echo "## min: the smallest image of tree/ (the anchor's first image: $min_size)"
  local a=out/min-mke2fs.img b=out/min-lanefs.img r
  local bcmd=("$lanefs" mkfs --size min -d tree "$b")
  local at=() a1=() bt=() afail='' bfail=''
  warm tree
  for r in $(seq 1 "$reps"); do
    local line="  rep $r:"
    if [ -z "$afail" ]; then
      rm -f "$a"
      truncate -s "$min_size" "$a"
      if timed "logs/min-mke2fs-$r.log" min_anchor "$a"; then
        at+=("$T"); a1+=("$T1")
        line+=" mke2fs + resize2fs -M $(printf %.2f "$T") s (mke2fs $(printf %.2f "$T1")), $(mib "$(bytes "$a")") MiB"
      else afail=$?; failed "mke2fs + resize2fs -M (anchor)" "$afail" "logs/min-mke2fs-$r.log" "$(show "$mke2fs" -q -F -t ext4 -d tree "$a") && $(show "$resize2fs" -M "$a")"; fi
    fi
    if [ -z "$bfail" ]; then
      rm -f "$b"
      if timed "logs/min-lanefs-$r.log" "${bcmd[@]}"; then bt+=("$T"); line+=", lanefs $(printf %.2f "$T") s, $(mib "$(bytes "$b")") MiB"
      else bfail=$?; failed "lanefs" "$bfail" "logs/min-lanefs-$r.log" "$(show "${bcmd[@]}")"; fi
    fi
    [ "$line" = "  rep $r:" ] || echo "$line"
  done
  echo " checks (untimed, last repetition's images):"
  local check="-" same='' asz=- bsz=-
  if [ -z "$afail" ]; then
    fsck_line "$a" min-mke2fs
    asz="$(bytes "$a") B ($(mib "$(bytes "$a")") MiB)"
  fi
  if [ -z "$bfail" ]; then
    fsck_line "$b" min-lanefs
    bsz="$(bytes "$b") B ($(mib "$(bytes "$b")") MiB)"
    mount_ro "$b" mnt/b
    if compare_trees tree mnt/b min-lanefs; then same=1; fi
    unmount mnt/b
    [ -n "$afail" ] || compare_super "$a" "$b" min
  fi
  echo "  sizes: mke2fs + resize2fs -M $asz, lanefs --size min $bsz"
  local am bm rt=- goal=-
  [ -n "$afail" ] && am="FAILED (exit $afail)" || am="$(stats "${at[@]}"), mke2fs part $(stats "${a1[@]}"); $asz"
  [ -n "$bfail" ] && bm="FAILED (exit $bfail)" || bm="$(stats "${bt[@]}"); $bsz"
  if [ -z "$bfail" ]; then
    [ -n "$same" ] && check="same tree read back" || check="**tree differs**"
  fi
  if [ -z "$afail$bfail" ]; then
    local x smaller=
    x=$(ratio "$(median "${at[@]}")" "$(median "${bt[@]}")")
    rt="$(fmt_x "$x"), size $(printf '%.3f' "$(ratio "$(bytes "$b")" "$(bytes "$a")")")x"
    [ "$(bytes "$b")" -le "$(bytes "$a")" ] && smaller=1
    if ge "$x" 5 && [ -n "$smaller" ] && [ -n "$same" ]; then goal="met"; else goal="not met"; fi
    check+=", $([ -n "$smaller" ] && echo "no larger" || echo "**larger**")"
  fi
  add_row "smallest image of tree/ ($(describe tree))" \
    "$(code "$mke2fs" -q -F -t ext4 -d tree "$a") (a fresh $min_size file), then $(code "$resize2fs" -M "$a")" "$am" \
    "$(code "${bcmd[@]}")" "$bm" "$rt" "no larger, ≥5x faster: $goal" "$check"
  drop "$a" "$b"
}

# ---- root: a root-owned image from a user's tree, as that user -------------------------------
row_root() {
  echo
  echo "## root: user-tree/ (owned by $user) into a root-owned $size image, as $user"
  local a=out/user/root-fakeroot.img b=out/user/root-lanefs.img r
  local acmd=(fakeroot -- "$mke2fs" -q -F -t ext4 -d user-tree "$a")
  local bcmd=("$lanefs" mkfs -s "$size" --all-root -d user-tree "$b")
  local at=() bt=() afail='' bfail=''
  as_user tar -C user-tree -cf - . | cat >/dev/null
  for r in $(seq 1 "$reps"); do
    local line="  rep $r:"
    if [ -z "$afail" ]; then
      rm -f "$a"
      as_user truncate -s "$size" "$a"
      if timed "logs/root-fakeroot-$r.log" as_user "${acmd[@]}"; then at+=("$T"); line+=" fakeroot mke2fs $(printf %.2f "$T") s"
      else afail=$?; failed "fakeroot mke2fs (anchor)" "$afail" "logs/root-fakeroot-$r.log" "$(show "${acmd[@]}")"; fi
    fi
    if [ -z "$bfail" ]; then
      rm -f "$b"
      if timed "logs/root-lanefs-$r.log" as_user "${bcmd[@]}"; then bt+=("$T"); line+=", lanefs $(printf %.2f "$T") s"
      else bfail=$?; failed "lanefs" "$bfail" "logs/root-lanefs-$r.log" "$(show "${bcmd[@]}")"; fi
    fi
    [ "$line" = "  rep $r:" ] || echo "$line"
  done
  echo " checks (untimed, last repetition's images):"
  local check="-" same='' n
  local owners=()
  [ -z "$afail" ] && fsck_line "$a" root-fakeroot
  [ -z "$bfail" ] && fsck_line "$b" root-lanefs
  if [ -z "$afail" ]; then mount_ro "$a" mnt/a; fi
  if [ -z "$bfail" ]; then mount_ro "$b" mnt/b; fi
  for m in mnt/a mnt/b; do
    mountpoint -q "$m" || continue
    n=$(find "$m" \( ! -uid 0 -o ! -gid 0 \) | wc -l)
    echo "  $m ($([ $m = mnt/a ] && echo fakeroot mke2fs || echo lanefs)): $n names not owned by 0:0"
    owners+=("$n")
  done
  if [ -z "$afail$bfail" ]; then
    if compare_trees mnt/a mnt/b root-images; then same=1; fi
    compare_super "$a" "$b" root
  fi
  mountpoint -q mnt/a && unmount mnt/a
  mountpoint -q mnt/b && unmount mnt/b
  local am bm rt=- goal=-
  [ -n "$afail" ] && am="FAILED (exit $afail)" || am=$(stats "${at[@]}")
  [ -n "$bfail" ] && bm="FAILED (exit $bfail)" || bm=$(stats "${bt[@]}")
  if [ -z "$afail$bfail" ]; then
    local x
    x=$(ratio "$(median "${at[@]}")" "$(median "${bt[@]}")")
    rt="$(fmt_x "$x")"
    if [ -n "$same" ] && [ "${owners[0]}" = 0 ] && [ "${owners[1]}" = 0 ]; then check="same owners (all 0:0), modes, contents"; else check="**images differ** (see above)"; fi
    if ge "$x" 5 && [ -n "$same" ]; then goal="met"; else goal="not met"; fi
  elif [ -z "$bfail" ]; then
    [ "${owners[-1]}" = 0 ] && check="all 0:0" || check="**not all 0:0**"
  fi
  add_row "root-owned image of a user's tree, as $user (user-tree/: $(describe user-tree))" \
    "$(code "${acmd[@]}") (a fresh $size file)" "$am" "$(code "${bcmd[@]}")" "$bm" "$rt" "same owners, ≥5x faster: $goal" "$check"
  drop "$a" "$b"
}

# ---- sparse: an Android sparse image ---------------------------------------------------
repro=(-U 0f8e1c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b -E hash_seed=11111111-2222-3333-4444-555555555555)
sparse_anchor() { # plain build, then img2simg; T1 = the plain build's part
  local t0
  t0=$(now)
  "$lanefs" mkfs -s "$sparse_size" "${repro[@]}" -d sparse-tree "$1" || return
  T1=$(echo "$(now) - $t0" | bc)
  img2simg "$1" "$2" || return
}
row_sparse() {
  echo
  echo "## sparse: sparse-tree/ into a $sparse_size image, SOURCE_DATE_EPOCH=1700000000 ${repro[*]}"
  export SOURCE_DATE_EPOCH=1700000000
  local p=out/sparse-plain.img ps=out/sparse-plain.simg s=out/sparse-lanefs.simg r
  local acmd1=("$lanefs" mkfs -s "$sparse_size" "${repro[@]}" -d sparse-tree "$p")
  local acmd2=(img2simg "$p" "$ps")
  local bcmd=("$lanefs" mkfs --sparse-output -s "$sparse_size" "${repro[@]}" -d sparse-tree "$s")
  local at=() a1=() bt=() afail='' bfail=''
  warm sparse-tree
  # Each repetition removes both outputs first, then runs the two in turn, the anchor first
  # in odd repetitions and second in even ones: whichever runs after img2simg (which reads
  # the whole 4 GiB image, holes too, into the page cache) gets memory the VM has not
  # touched lately, which costs more to fill (measured: +0.3 s of page clearing).
  for r in $(seq 1 "$reps"); do
    local line="  rep $r:" order=(anchor sparse) one sep=''
    [ $((r % 2)) = 0 ] && order=(sparse anchor)
    rm -f "$p" "$ps" "$s"
    for one in "${order[@]}"; do
      if [ "$one" = anchor ] && [ -z "$afail" ]; then
        if timed "logs/sparse-plain-$r.log" sparse_anchor "$p" "$ps"; then
          at+=("$T"); a1+=("$T1")
          line+="${sep} plain + img2simg $(printf %.2f "$T") s (plain $(printf %.2f "$T1"))"
        else afail=$?; failed "plain lanefs mkfs + img2simg (anchor)" "$afail" "logs/sparse-plain-$r.log" "$(show "${acmd1[@]}") && $(show "${acmd2[@]}")"; fi
      elif [ "$one" = sparse ] && [ -z "$bfail" ]; then
        if timed "logs/sparse-lanefs-$r.log" "${bcmd[@]}"; then bt+=("$T"); line+="${sep} --sparse-output $(printf %.2f "$T") s"
        else bfail=$?; failed "lanefs --sparse-output" "$bfail" "logs/sparse-lanefs-$r.log" "$(show "${bcmd[@]}")"; fi
      fi
      [ "$line" = "  rep $r:" ] || sep=','
    done
    [ "$line" = "  rep $r:" ] || echo "$line"
  done
  unset SOURCE_DATE_EPOCH
  echo " checks (untimed, last repetition's images):"
  local check="-" same=''
  if [ -z "$afail" ]; then
    fsck_line "$p" sparse-plain
    echo "  sizes: image data $(($(du -B1 "$p" | cut -f1) / 1000000)) MB (of $sparse_size), img2simg's $(mib "$(bytes "$ps")") MiB"
  fi
  if [ -z "$bfail" ]; then
    echo "  --sparse-output: $(mib "$(bytes "$s")") MiB"
  fi
  if [ -z "$afail$bfail" ]; then
    rm -f out/sparse-back.img
    if ! simg2img "$s" out/sparse-back.img >logs/sparse-simg2img.log 2>&1; then
      echo "  simg2img $s: FAILED: $(tail -n 3 logs/sparse-simg2img.log)"
      check="**simg2img failed**"
    elif cmp "$p" out/sparse-back.img >logs/sparse-cmp.log 2>&1; then
      same=1
      check="simg2img gives the plain build's bytes"
      echo "  simg2img $s: the plain build's bytes"
    else
      check="**simg2img differs from the plain build**"
      echo "  simg2img $s: DIFFERS from $p: $(head -n 1 logs/sparse-cmp.log)"
    fi
    rm -f out/sparse-back.img
  fi
  local am am1 bm rt=- rt1=- goal=- goal1=-
  [ -n "$afail" ] && am="FAILED (exit $afail)" || am=$(stats "${at[@]}")
  [ -n "$afail" ] && am1="FAILED (exit $afail)" || am1=$(stats "${a1[@]}")
  [ -n "$bfail" ] && bm="FAILED (exit $bfail)" || bm=$(stats "${bt[@]}")
  if [ -z "$afail$bfail" ]; then
    local x o
    x=$(ratio "$(median "${at[@]}")" "$(median "${bt[@]}")")
    rt="$(fmt_x "$x")"
    o=$(ratio "$(median "${bt[@]}")" "$(median "${a1[@]}")")
    rt1="sparse $(printf '%+.0f' "$(echo "($o - 1) * 100" | bc -l)") % over plain"
    goal="simg2img = plain: $([ -n "$same" ] && echo met || echo "not met")"
    if [ -n "$same" ] && [ "$(echo "$o <= 1.10" | bc -l)" = 1 ]; then goal1="met"; else goal1="not met"; fi
  fi
  local desc sde=SOURCE_DATE_EPOCH=1700000000
  desc="$(describe sparse-tree) (${sparse_list[*]}) in a $sparse_size image"
  add_row "sparse output: $desc, against plain + img2simg" \
    "$(code "$sde" "${acmd1[@]}"), then $(code "${acmd2[@]}")" "$am" "$(code "$sde" "${bcmd[@]}")" "$bm" "$rt" "$goal" "$check"
  add_row "sparse output: $desc, against the plain build alone" \
    "$(code "$sde" "${acmd1[@]}")" "$am1" "$(code "$sde" "${bcmd[@]}")" "$bm" "$rt1" "sparse ≤ plain + 10 %: $goal1" "$check"
  drop "$p" "$ps" "$s"
}

for r in tar min root sparse; do
  if has_row "$r"; then "row_$r"; fi
done

echo
echo "| comparison | anchor | anchor median (min-max) | lanefs | lanefs median (min-max) | ratio | goal | check |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${table[@]}"
echo
echo "mke2fs = $mke2fs ($mke2fs_version) with MKE2FS_CONFIG=mke2fs.conf (Debian 12's), resize2fs = $resize2fs, lanefs = $src_bin (copied to bin/lanefs); paths are relative to $work; the root row's commands run as $user (setpriv), the sparse row's with SOURCE_DATE_EPOCH=1700000000."
