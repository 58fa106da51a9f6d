//! An idmapped mount of a lanefs mount behaves as one of the kernel's ext4: root mounts
//! with `allow_other` (lanefs then allows idmapped mounts, FUSE_ALLOW_IDMAP), and a clone
//! of the mount mapped through a user namespace (on-disk 0 shows as `lanefs-a`) is
//! attached beside it. One script, run as root, has `lanefs-a` and root work through
//! the idmapped mount: ownership as shown both ways, creates stored as root's, a write
//! that clears set-user-ID, chown, an ACL, xattrs (trusted.* listed for root alone: a
//! request in which the kernel names no caller), inode flags. It runs on a kernel ext4
//! loop mount and on lanefs, of identical images, and every line must be the same.

mod fuse_common;

use fuse_common::*;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::Command;

/// Run with the idmapped mount as `$1`, the mount it maps as `$2`, lanefs-a's ids in `A`
/// and `AG`.
const SCRIPT: &str = r#"
set -u
umask 022
as_a() { setpriv --reuid="$A" --regid="$AG" --clear-groups "$@" 2>&1; echo "exit $?"; }
show() { stat -c '%n %u:%g %A' "$@" 2>&1 | sed "s|$1|M|;s|$2|U|"; }
# Made by root on the plain mount: owned by 0 on disk.
mkdir "$2/d"; chmod 777 "$2/d"
echo data > "$2/suid"; chmod 4755 "$2/suid"
setfattr -n trusted.t -v 1 "$2/suid"; setfattr -n user.u -v 2 "$2/suid"
echo "-- as shown"
stat -c '%u:%g %A' "$1/suid" "$1/d" "$2/suid"
echo "-- lanefs-a creates"
as_a touch "$1/d/f"
as_a mkdir "$1/d/sub"
as_a ln -s f "$1/d/l"
as_a mkfifo "$1/d/p"
stat -c '%n %u:%g' "$1/d/f" "$1/d/sub" "$2/d/f" "$2/d/sub" "$2/d/p" | sed "s|$1|M|;s|$2|U|"
stat -c '%u:%g' "$2/d/l"
echo "-- root creates through it (no mapping for root)"
touch "$1/d/byroot" 2>&1 | sed "s|$1|M|"
echo "-- lanefs-a writes its set-user-ID file"
as_a sh -c "echo more >> '$1/suid'"
stat -c '%A' "$1/suid"
echo "-- chown and chmod"
as_a chmod 2755 "$1/d/f"
stat -c '%A' "$2/d/f"
as_a chown "$A:$AG" "$1/d/f"
chown 0:0 "$1/d/f" 2>&1 | sed "s|$1|M|"
stat -c '%u:%g' "$2/d/f"
as_a chgrp 0 "$1/d/f"
echo "-- an ACL"
as_a setfacl -m "u:$A:r" "$1/d/f"
getfacl -n "$2/d/f" 2>/dev/null | grep -v '^#'
getfacl -n "$1/d/f" 2>/dev/null | grep -v '^#'
echo "-- xattrs"
getfattr -d -m - "$1/suid" 2>&1 | grep -v '^#'
as_a getfattr -d -m - "$1/suid" | grep -v '^#'
as_a setfattr -n user.v -v 3 "$1/d/f"
getfattr -n user.v "$2/d/f" 2>&1 | grep -v '^#'
echo "-- inode flags"
as_a chattr +A "$1/d/f"
as_a chattr +i "$1/d/f"
lsattr -d "$2/d/f" 2>&1 | cut -c1-22
chattr +i "$1/d/f"; lsattr -d "$2/d/f" 2>&1 | cut -c1-22; chattr -i "$1/d/f"
echo "-- removal"
as_a rm -r "$1/d/sub" "$1/d/l" "$1/d/p"
ls "$2/d"
"#;

/// A user namespace in which 0 is `uid`/`gid` outside: a `sleep` in one, killed on drop.
struct UserNs(std::process::Child);

impl UserNs {
    fn new(uid: u32, gid: u32) -> UserNs {
        let child = Command::new("unshare")
            .args(["--user", "sleep", "120"])
            .spawn()
            .expect("unshare --user");
        let pid = child.id();
        let ours = std::fs::read_link("/proc/self/ns/user").unwrap();
        let ns = format!("/proc/{pid}/ns/user");
        let start = std::time::Instant::now();
        while std::fs::read_link(&ns).ok().as_ref() == Some(&ours) {
            assert!(
                start.elapsed().as_secs() < 10,
                "unshare made no user namespace"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::fs::write(format!("/proc/{pid}/uid_map"), format!("0 {uid} 1\n")).unwrap();
        std::fs::write(format!("/proc/{pid}/gid_map"), format!("0 {gid} 1\n")).unwrap();
        UserNs(child)
    }

    fn fd(&self) -> std::fs::File {
        std::fs::File::open(format!("/proc/{}/ns/user", self.0.id())).unwrap()
    }
}

impl Drop for UserNs {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Attach at `dst` a clone of the mount at `src`, idmapped through `ns`.
fn idmapped(src: &Path, dst: &Path, ns: &UserNs) {
    use rustix::mount::{move_mount, open_tree, MoveMountFlags, OpenTreeFlags};
    let tree: OwnedFd = open_tree(
        rustix::fs::CWD,
        src,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .expect("open_tree");
    let userns = ns.fd();
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: mount_setattr reads `attr`, a mount_attr of the size passed, and the empty
    // path string; both live for the call, and `tree` is an open mount descriptor.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    assert_eq!(
        rc,
        0,
        "mount_setattr(MOUNT_ATTR_IDMAP) on {}: {}",
        src.display(),
        std::io::Error::last_os_error()
    );
    move_mount(
        &tree,
        c"",
        rustix::fs::CWD,
        dst,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .expect("move_mount");
}

/// Run the script on the idmapped mount `idm` of `under`: its output and errors.
fn run_script(idm: &Path, under: &Path, u: &Users) -> String {
    let out = run(Command::new("bash")
        .arg("-c")
        .arg(SCRIPT)
        .arg("bash")
        .arg(idm)
        .arg(under)
        .env("A", u.a.to_string())
        .env("AG", u.a_gid.to_string()));
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s.replace(&idm.display().to_string(), "M")
        .replace(&under.display().to_string(), "U")
}

#[test]
fn an_idmapped_mount_as_on_kernel_ext4() {
    let test = "an_idmapped_mount_as_on_kernel_ext4";
    if !fuse_ready(test) {
        return;
    }
    let Some(u) = Users::get(test) else {
        return;
    };
    for tool in ["setfacl", "getfattr", "chattr", "unshare"] {
        if !have(tool) {
            skip(
                test,
                &format!("{tool} not installed (acl, attr, e2fsprogs, util-linux)"),
            );
            return;
        }
    }
    let t = u.a_dir("lanefs-idmapped-");
    let (img, kimg) = (t.path().join("l.img"), t.path().join("k.img"));
    mkfs(&img, "64M", &[]);
    mkfs(&kimg, "64M", &[]);
    let ns = UserNs::new(u.a, u.a_gid);
    let dirs = |name: &str| {
        let (under, idm) = (t.path().join(name), t.path().join(format!("{name}-idm")));
        std::fs::create_dir_all(&under).unwrap();
        std::fs::create_dir_all(&idm).unwrap();
        (under, idm)
    };

    // Kernel ext4, loop-mounted by root.
    let (kdir, kidm) = dirs("k");
    let want = kernel_mount_with(&kimg, &kdir, "loop", |k| {
        idmapped(k, &kidm, &ns);
        let out = run_script(&kidm, k, &u);
        let _ = run(Command::new("umount").arg(&kidm));
        out
    });

    // lanefs, mounted by root with allow_other.
    let (ldir, lidm) = dirs("l");
    let m = Mount::new(&img, &ldir, "allow_other");
    idmapped(&m.dir, &lidm, &ns);
    let got = run_script(&lidm, &m.dir, &u);
    let _ = run(Command::new("umount").arg(&lidm));
    m.umount();

    assert!(
        want.contains(&format!("{}:{}", u.a, u.a_gid)) && want.contains("trusted.t"),
        "the script did not run as planned on the kernel:\n{want}"
    );
    assert!(
        got == want,
        "lanefs (-) and kernel ext4 (+) through an idmapped mount differ:\n{}\nlanefs's whole output:\n{got}",
        line_diff(&got, &want)
    );
    e2fsck_clean(&img);
    e2fsck_clean(&kimg);
}
