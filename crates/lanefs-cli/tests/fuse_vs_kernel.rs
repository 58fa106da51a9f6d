//! The mount judged against the kernel's ext4: one shell script runs on a lanefs mount
//! and on a kernel ext4 loop mount of an identical image, and every line it prints must
//! be the same. POSIX ACLs (`setfacl`, `getfacl`, creates under default ACLs with a
//! umask, chmod of a file with an ACL, reads by another user only an ACL entry lets in,
//! set-group-ID clearing) and inode flags (`chattr`/`lsattr`: immutable and append-only
//! files and directories refusing what ext4 refuses, the recorded flags). The kernel then
//! reads what lanefs stored. RENAME_WHITEOUT and O_TMPFILE are compared the same way,
//! from Rust.

mod fuse_common;

use fuse_common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The script, run with the mount point as `$1`; every line of output is compared.
const ACL_SCRIPT: &str = r#"
set -u
cd "$1"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@" 2>/dev/null; echo "exit $?"; }
show() { for p in "$@"; do stat -c '%n %A %u %g' "$p"; getfacl -cpn "$p" 2>&1; done; }

umask 022
mkdir d
setfacl -d -m u::rwx,u:65534:rwx,g::r-x,m::rwx,o::--- d
touch d/f
mkdir d/sub
mkdir d/sub/deeper
mknod d/fifo p
ln -s f d/link
echo data > d/g
show d d/f d/sub d/sub/deeper d/fifo d/g
stat -c '%n %A' d/link

# The umask applies only where no default ACL is inherited.
umask 077
touch d/h plain
mkdir plaindir
show d/h plain plaindir
umask 022

# chmod of a file with an access ACL moves the mask, not the owning group's entry.
chmod 604 d/f
show d/f
chmod 777 d/f
show d/f

# A file only an ACL entry lets nobody read, then write; then not.
echo secret > p
chmod 600 p
as_nobody cat p
setfacl -m u:65534:r p
show p
as_nobody cat p
as_nobody sh -c 'echo more >> p'
setfacl -m u:65534:rw p
as_nobody sh -c 'echo more >> p'
cat p
setfacl -m m::r p
as_nobody sh -c 'echo again >> p'
setfacl -b p
show p
as_nobody cat p

# A directory an ACL opens to nobody: list and create inside.
mkdir closed
chmod 700 closed
as_nobody ls closed
setfacl -m u:65534:rwx closed
as_nobody touch closed/mine
show closed closed/mine
setfacl -k d
show d

# Setting an ACL clears set-group-ID unless the caller is in the file's group.
touch sg sg2
chown 65534:0 sg
chown 65534:65534 sg2
chmod 2775 sg sg2
as_nobody setfacl -m u:65534:rwx sg
as_nobody setfacl -m u:65534:rwx sg2
show sg sg2

# fallocate by a caller without CAP_FSETID clears set-user-ID, and set-group-ID where
# the file is group-executable or the caller is not in its group (file_remove_privs).
for m in 6666 6676 6766 6777; do
  for op in "-l 65536" "-p -o 0 -l 4096" "-z -o 0 -l 4096"; do
    rm -f kp; head -c 8192 /dev/zero > kp; chmod $m kp
    as_nobody fallocate $op kp
    stat -c "$m fallocate $op: %a" kp
  done
done
chmod 6666 kp; fallocate -l 131072 kp; stat -c 'root: %a' kp

# An access ACL with a mask and no named entries is more than the mode: it is stored.
touch masked
setfacl -m m::r masked
getfattr -m - masked 2>&1 | grep -c posix_acl_access
show masked
"#;

/// Run `script` (bash, the mount point as `$1`): its output and errors.
fn run_script(script: &str, dir: &Path) -> String {
    let out = run(Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg("bash")
        .arg(dir));
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s
}

/// Run `script` on a kernel ext4 loop mount of `kimg` and on a lanefs mount of `img`
/// (both made by `lanefs mkfs` alike); panics unless every line is the same. Returns the
/// output.
fn same_as_kernel(script: &str, t: &Path, img: &Path, kimg: &Path) -> String {
    let kdir = t.join("k");
    std::fs::create_dir_all(&kdir).unwrap();
    let out = run(Command::new("mount")
        .args(["-t", "ext4", "-o", "loop"])
        .arg(kimg)
        .arg(&kdir));
    assert!(
        out.status.success(),
        "kernel mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = run_script(script, &kdir);
    let _ = run(Command::new("umount").arg(&kdir));
    // Root with allow_other: the kernel checks permissions, ACLs included.
    let m = Mount::new(img, &t.join("mnt"), "allow_other");
    let got = run_script(script, &m.dir);
    m.umount();
    assert_eq!(got, want, "lanefs (left) and kernel ext4 (right) differ");
    e2fsck_clean(img);
    want
}

/// `getfacl` of every path under `d`, in name order (readdir order differs by image).
fn all_acls(d: &Path) -> String {
    let out = run(Command::new("sh")
        .arg("-c")
        .arg("find . -path ./lost+found -prune -o -print | sort | xargs -d '\\n' getfacl -pn")
        .current_dir(d));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tools_ready(test: &str) -> bool {
    if !fuse_ready(test) {
        return false;
    }
    for tool in ["setfacl", "getfacl", "setpriv", "chattr", "lsattr"] {
        if tool_missing(tool) {
            return skip(
                test,
                &format!("{tool} not installed (packages acl, util-linux, e2fsprogs)"),
            );
        }
    }
    true
}

fn tool_missing(t: &str) -> bool {
    !Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {t}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn acls_behave_as_on_kernel_ext4() {
    if !tools_ready("acls_behave_as_on_kernel_ext4") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, kimg) = (t.path().join("l.img"), t.path().join("k.img"));
    mkfs(&img, "64M", &[]);
    mkfs(&kimg, "64M", &[]);
    let out = same_as_kernel(ACL_SCRIPT, t.path(), &img, &kimg);
    assert!(out.contains("secret"), "the script did not run:\n{out}");

    // What lanefs stored, read by the kernel.
    let stored = with_kernel_mount(&img, &t.path().join("kr"), all_acls);
    let kernel_stored = with_kernel_mount(&kimg, &t.path().join("kk"), all_acls);
    assert!(stored.contains("user:65534:"), "{stored}");
    assert_eq!(stored, kernel_stored);
}

const CHATTR_SCRIPT: &str = r#"
set -u
cd "$1"
try() { "$@" 2>&1 | sed "s|$PWD/||g; s|^[a-z]*: ||"; echo "exit ${PIPESTATUS[0]}"; }
mkdir d; echo data > f; echo log > a; ln -s f s; mkfifo p
lsattr -d d f a
try chattr +i f
lsattr f
try sh -c 'echo x >> f'
try rm f
try mv f g
try ln f h
try chmod 600 f
try chown 1 f
try touch f
try setfattr -n user.k -v v f
try chattr -i f
try chattr +a a
try sh -c 'echo more >> a'
try sh -c 'echo over > a'
try truncate -s 0 a
try rm a
try chattr -a a
cat a
try chattr +AdsSu f
lsattr f
try chattr +D f
try chattr +DT d
lsattr -d d
try chattr +C f
lsattr f d a
try chattr +i d
try touch d/new
try rmdir d
try chattr -i d
try chattr +a d
try touch d/new
try rm d/new
try chattr -a d
try chattr -AdsSu f
lsattr f
xfs_io -c 'chattr +a' -c lsattr a 2>&1 | sed 's|^ *||'
try chattr -a a
stat -c '%n %s' f a
# Times to now on an append-only file or directory are allowed; explicit times are not.
mkdir ad
chattr +a a ad
try touch a
try touch ad
try touch -d @1 a
try touch -m -d @1 ad
chattr -a a ad
# An inode-flag change is a change: the change time moves at once, also when the
# attributes were cached a moment before.
c0=$(stat -c %z f); sleep 0.05; chattr +d f; c1=$(stat -c %z f)
[ "$c0" != "$c1" ] && echo "chattr moved the change time"
"#;

#[test]
fn chattr_behaves_as_on_kernel_ext4() {
    if !tools_ready("chattr_behaves_as_on_kernel_ext4") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (img, kimg) = (t.path().join("l.img"), t.path().join("k.img"));
    mkfs(&img, "64M", &[]);
    mkfs(&kimg, "64M", &[]);
    let out = same_as_kernel(CHATTR_SCRIPT, t.path(), &img, &kimg);
    assert!(out.contains("----i---------e------- f"), "{out}");
    // Changes lanefs has no mechanism for are refused by name of the errno: clearing
    // extents (the kernel migrates to block maps), data journalling.
    let m = Mount::new(&img, &t.path().join("mnt"), "");
    for flag in ["-e", "+j"] {
        let out = run(Command::new("chattr").arg(flag).arg(m.path("f")));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Operation not supported"),
            "chattr {flag}: {out:?}"
        );
    }
    m.umount();
    e2fsck_clean(&img);
}

/// Run `probe` on a kernel ext4 loop mount of a fresh image and on a lanefs mount of
/// another (both from `lanefs mkfs`); panics unless their outputs are the same. Returns
/// the output and the lanefs image (clean by e2fsck), with `t`'s path for more mounts.
fn probe_same_as_kernel(t: &Path, probe: fn(&Path) -> String) -> (String, PathBuf) {
    let (img, kimg) = (t.join("l.img"), t.join("k.img"));
    mkfs(&img, "64M", &[]);
    mkfs(&kimg, "64M", &[]);
    let want = kernel_mount_with(&kimg, &t.join("k"), "loop", probe);
    let m = Mount::new(&img, &t.join("mnt"), "allow_other");
    let got = probe(&m.dir);
    m.umount();
    assert_eq!(got, want, "lanefs (left) and kernel ext4 (right) differ");
    e2fsck_clean(&img);
    (want, img)
}

/// The names in directory `d`, sorted.
fn sorted_names(d: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// renameat2 with RENAME_WHITEOUT (overlayfs's copy-up) in `d`: every result and what
/// each name is after, as lines (errors by name, so both file systems print alike).
fn whiteout_probe(d: &Path) -> String {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    use std::fmt::Write;
    use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
    let (wo, nr, ex) = (
        RenameFlags::WHITEOUT,
        RenameFlags::NOREPLACE,
        RenameFlags::EXCHANGE,
    );
    let mut out = String::new();
    let rn = |out: &mut String, a: &str, b: &str, f: RenameFlags| {
        let r = renameat_with(CWD, d.join(a), CWD, d.join(b), f);
        writeln!(out, "rename {a} {b} {f:?}: {r:?}").unwrap();
    };
    let show = |out: &mut String, p: &str| {
        let line = match std::fs::symlink_metadata(d.join(p)) {
            Ok(m) => format!(
                "mode {:o} rdev {:x} uid {} gid {} nlink {} size {}",
                m.mode(),
                m.rdev(),
                m.uid(),
                m.gid(),
                m.nlink(),
                m.size()
            ),
            Err(e) => format!("{:?}", e.kind()),
        };
        writeln!(out, "{p}: {line}").unwrap();
    };
    std::fs::write(d.join("a"), b"data").unwrap();
    rn(&mut out, "a", "b", wo);
    show(&mut out, "a");
    show(&mut out, "b");
    // NOREPLACE too: an existing target refuses and nothing changes.
    std::fs::write(d.join("c"), b"target").unwrap();
    rn(&mut out, "b", "c", wo | nr);
    show(&mut out, "b");
    // Replacing a target.
    rn(&mut out, "b", "c", wo);
    show(&mut out, "b");
    show(&mut out, "c");
    writeln!(out, "c holds {:?}", std::fs::read(d.join("c")).unwrap()).unwrap();
    // A directory leaves a set-group-ID directory: the whiteout takes its group.
    std::fs::create_dir_all(d.join("sg/dir/x")).unwrap();
    chown(d.join("sg"), Some(0), Some(65534)).unwrap();
    std::fs::set_permissions(d.join("sg"), std::fs::Permissions::from_mode(0o2775)).unwrap();
    rn(&mut out, "sg/dir", "moved", wo);
    for p in ["sg", "sg/dir", "moved", "moved/x"] {
        show(&mut out, p);
    }
    // With EXCHANGE the VFS refuses; a whiteout is renamed and removed as any node.
    rn(&mut out, "c", "moved", ex | wo);
    rn(&mut out, "a", "a2", RenameFlags::empty());
    show(&mut out, "a2");
    writeln!(out, "unlink a2: {:?}", std::fs::remove_file(d.join("a2"))).unwrap();
    writeln!(out, "names: {:?}", sorted_names(d)).unwrap();
    out
}

#[test]
fn rename_whiteout_as_on_kernel_ext4() {
    if !fuse_ready("rename_whiteout_as_on_kernel_ext4") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (want, img) = probe_same_as_kernel(t.path(), whiteout_probe);
    let kdir = t.path().join("k");
    assert!(
        want.contains("sg/dir: mode 20000 rdev 0 uid 0 gid 65534"),
        "{want}"
    );
    // The kernel reads the whiteouts lanefs wrote.
    let seen = with_kernel_mount(&img, &kdir, |d| {
        std::fs::symlink_metadata(d.join("b")).map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.mode(), m.rdev())
        })
    });
    assert_eq!(seen.unwrap(), (0o20000, 0));
}

/// open(2) with O_TMPFILE in `d`: the unnamed file's attributes, a name given with
/// linkat(AT_EMPTY_PATH), O_EXCL refusing one, a set-group-ID directory's group; as lines.
fn tmpfile_probe(d: &Path) -> String {
    use rustix::fs::{fstat, linkat, openat, AtFlags, Mode, OFlags, CWD};
    use std::fmt::Write;
    use std::os::unix::fs::{chown, PermissionsExt};
    let mut out = String::new();
    let st = |out: &mut String, what: &str, fd: &rustix::fd::OwnedFd| {
        let s = fstat(fd).unwrap();
        writeln!(
            out,
            "{what}: mode {:o} nlink {} uid {} gid {} size {}",
            s.st_mode, s.st_nlink, s.st_uid, s.st_gid, s.st_size
        )
        .unwrap();
    };
    let tmp = |dir: &Path, extra: OFlags| {
        openat(
            CWD,
            dir,
            OFlags::TMPFILE | OFlags::RDWR | extra,
            Mode::from_raw_mode(0o640),
        )
    };
    let link = |fd: &rustix::fd::OwnedFd, to: &Path| {
        linkat(fd, "", CWD, to, AtFlags::EMPTY_PATH).map_err(|e| e.kind())
    };
    let fd = tmp(d, OFlags::empty()).unwrap();
    st(&mut out, "unnamed", &fd);
    rustix::io::write(&fd, b"made unnamed").unwrap();
    writeln!(out, "link: {:?}", link(&fd, &d.join("named"))).unwrap();
    st(&mut out, "named", &fd);
    writeln!(out, "again: {:?}", link(&fd, &d.join("second"))).unwrap();
    st(&mut out, "twice", &fd);
    drop(fd);
    writeln!(out, "reads {:?}", std::fs::read(d.join("second")).unwrap()).unwrap();
    // O_EXCL: never linkable.
    let fd = tmp(d, OFlags::EXCL).unwrap();
    writeln!(out, "excl link: {:?}", link(&fd, &d.join("never"))).unwrap();
    st(&mut out, "excl", &fd);
    drop(fd);
    // In a set-group-ID directory the file takes the directory's group.
    std::fs::create_dir(d.join("sg")).unwrap();
    chown(d.join("sg"), Some(0), Some(65534)).unwrap();
    std::fs::set_permissions(d.join("sg"), std::fs::Permissions::from_mode(0o2777)).unwrap();
    let fd = tmp(&d.join("sg"), OFlags::empty()).unwrap();
    st(&mut out, "in sg", &fd);
    writeln!(out, "sg link: {:?}", link(&fd, &d.join("sg/f"))).unwrap();
    drop(fd);
    // Not in a directory, or read-only: refused as the VFS refuses.
    let e = tmp(&d.join("named"), OFlags::empty()).map(drop);
    writeln!(out, "on a file: {e:?}").unwrap();
    writeln!(out, "names: {:?}", sorted_names(d)).unwrap();
    out
}

#[test]
fn o_tmpfile_as_on_kernel_ext4() {
    if !fuse_ready("o_tmpfile_as_on_kernel_ext4") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (want, img) = probe_same_as_kernel(t.path(), tmpfile_probe);
    let kdir = t.path().join("k");
    assert!(want.contains("nlink 0 uid 0 gid 0 size 0"), "{want}");
    let seen = with_kernel_mount(&img, &kdir, |d| std::fs::read(d.join("named")));
    assert_eq!(seen.unwrap(), b"made unnamed");
}
