//! Two unprivileged users on one mount made by one of them (issue 47): whenever users
//! other than the mounter can reach a lanefs mount (`allow_other`, `allow_root`), every
//! access is checked as ext4 checks it, whoever mounted it. One shell script, run as root,
//! has `lanefs-a` and `lanefs-b` (and root) exercise every operation on each other's
//! files: lookups, reads, writes, creates, unlinks, renames and links in 755, 700, 711,
//! 777 and sticky 1777 directories; supplementary groups; an ACL entry; set-group-ID
//! inheritance; chmod, chown, chgrp, truncate and utimes by owners and others; user.* and
//! trusted.* xattrs; chattr and lsattr; the mounter meeting root's private file. It runs on
//! a kernel ext4 loop mount and on a `lanefs mount -o allow_other` made by `lanefs-a`
//! through fusermount3, of identical images, and every line it prints must be the same.
//!
//! Needs the users `lanefs-a`, `lanefs-b` and the group `lanefs-g` (`.ci/run` makes
//! them) besides what every FUSE test needs; `user_allow_other` is added to
//! /etc/fuse.conf for the test only (`UserAllowOther`).

mod fuse_common;

use fuse_common::*;
use std::path::Path;
use std::process::Command;

/// The script, run as root with the mount point as `$1` and the ids in `A`, `AG` (A's
/// group), `B`, `BG` and `G` (lanefs-g); every line of output is compared.
const USERS_SCRIPT: &str = r#"
set -u
cd "$1"
umask 022
# as_X CMD...: run CMD as that user (its output and errors, then its exit status).
# A and B have only their own group unless with G (lanefs-g as a supplementary group).
as_a() { setpriv --reuid="$A" --regid="$AG" --clear-groups "$@" 2>&1; echo "exit $?"; }
as_b() { setpriv --reuid="$B" --regid="$BG" --clear-groups "$@" 2>&1; echo "exit $?"; }
as_ag() { setpriv --reuid="$A" --regid="$AG" --groups="$G" "$@" 2>&1; echo "exit $?"; }
as_bg() { setpriv --reuid="$B" --regid="$BG" --groups="$G" "$@" 2>&1; echo "exit $?"; }
as_root() { "$@" 2>&1; echo "exit $?"; }
show() { for p in "$@"; do stat -c '%n %A %u %g %h' "$p" 2>&1; done; }
step() { echo "== $*"; }

step root makes the top directory, owned by A
mkdir top
chown "$A:$AG" top
cd top
show .

step A makes directories of every mode, each with a private, a public and an open file
for m in 755 700 711 777 1777; do
  as_a mkdir "d$m"
  as_a chmod "$m" "d$m"
  as_a sh -c "echo secret-$m > d$m/priv && chmod 600 d$m/priv"
  as_a sh -c "echo public-$m > d$m/pub"
  as_a sh -c "echo open-$m > d$m/open && chmod 666 d$m/open"
  as_a mkdir "d$m/adir"
done
show d* d*/*

for m in 755 700 711 777 1777; do
  d="d$m"
  step B in A\'s $m directory
  as_b ls "$d"
  as_b stat -c '%n %s' "$d/pub"
  as_b cat "$d/pub"
  as_b cat "$d/priv"
  as_b cat "$d/open"
  as_b sh -c "echo b-$m >> $d/open"
  as_b sh -c "echo b-$m >> $d/pub"
  as_b sh -c ": > $d/pub"
  as_b truncate -s 2 "$d/priv"
  as_b touch "$d/b-new"
  as_b mkdir "$d/b-dir"
  as_b ln -s pub "$d/b-sym"
  as_b mkfifo "$d/b-fifo"
  as_b ln "$d/priv" "$d/b-hard-priv"
  as_b ln "$d/open" "$d/b-hard-open"
  as_b mv "$d/b-new" "$d/b-renamed"
  as_b mv "$d/pub" "$d/pub-by-b"
  as_b mv "$d/adir" "$d/b-dir/"
  as_b mv "$d/adir" "$d/adir-by-b"
  as_b rm -f "$d/priv"
  as_b rm -f "$d/b-renamed"
  as_b rmdir "$d/b-dir"
  as_b sh -c "echo mine > $d/b-file"
  step A in its $m directory after B
  as_a cat "$d/b-file"
  as_a sh -c "echo a >> $d/b-file"
  as_a chmod 600 "$d/b-file"
  as_a rm -f "$d/b-file"
  as_a rm -f "$d/b-fifo"
  as_a ls "$d"
done

step the mounter, A, meets root\'s private file in its own directory
echo rootsecret > rootfile
chmod 600 rootfile
as_a cat rootfile
as_a sh -c 'echo a >> rootfile'
as_a chmod 644 rootfile
as_a chown "$A" rootfile
as_a touch -d '2001-02-03 04:05:06 UTC' rootfile
as_a setfattr -n user.a -v a rootfile
as_a mv rootfile rootfile-moved
as_a rm -f rootfile-moved
as_root ls

step chmod, chown, chgrp, truncate and utimes by the owner and by others
as_a sh -c 'echo 0123456789 > t && chmod 666 t'
as_b chmod 777 t
as_b chown "$B" t
as_b chgrp "$BG" t
as_a chown "$B" t
as_a chown "$A" t
as_a chgrp "$G" t
as_ag chgrp "$G" t
as_bg chgrp "$AG" t
as_b truncate -s 4 t
as_b touch t
as_b touch -m t
as_b touch -d '2001-02-03 04:05:06 UTC' t
as_b touch -m -d '2001-02-03 04:05:06 UTC' t
as_a touch -d '2002-03-04 05:06:07.123456789 UTC' t
stat -c '%n %s %X %Y' t
as_b sh -c 'echo b > t'
as_a sh -c 'echo 0123 > u'
as_b touch u
as_b touch -d '2001-02-03 04:05:06 UTC' u
as_b truncate -s 1 u
as_a chmod 4755 u
show t u
as_a chmod 2755 u
show u
as_ag chmod 2755 u
show u
as_a chown "$A:$AG" u
show u
as_ag chgrp "$G" u
as_ag chmod 6755 u
show u
as_a sh -c 'echo more >> u'
show u

step set-user-ID and set-group-ID cleared by writes, truncates, fallocate and chowns
as_a sh -c 'echo 0123456789 > k && chmod 6777 k'
as_b sh -c 'echo b >> k'
show k
as_a chmod 6777 k
as_b truncate -s 3 k
show k
as_a chmod 6767 k
as_b fallocate -l 8192 k
show k
as_a chmod 6777 k
as_root sh -c 'echo r >> k'
as_root truncate -s 2 k
show k
as_a chmod 6755 k
as_root chown "$A:$AG" k
show k
as_a chmod 6745 k
as_root chown "$A:$AG" k
show k
as_a chmod 6745 k
as_a chown "$A:$AG" k
show k
as_a chmod 2745 k
as_ag chgrp "$G" k
show k
as_a chmod 6745 k
as_b sh -c 'echo b >> k'
as_a sh -c 'echo a >> k'
show k

step a supplementary group
as_a sh -c 'echo group-data > grp && chmod 640 grp'
as_ag chgrp "$G" grp
as_a mkdir gdir
as_ag chgrp "$G" gdir
as_a chmod 770 gdir
show grp gdir
as_b cat grp
as_bg cat grp
as_bg sh -c 'echo more >> grp'
as_b touch gdir/b
as_bg touch gdir/bg
as_bg ls gdir
as_bg rm -f gdir/bg
as_a chmod 070 grp
as_ag cat grp
as_bg cat grp

step an ACL entry lets B in
as_a sh -c 'echo acl-data > acl && chmod 600 acl'
as_b cat acl
as_a setfacl -m "u:$B:r" acl
as_b cat acl
as_b sh -c 'echo b >> acl'
as_b setfacl -m "u:$B:rw" acl
as_a setfacl -m "u:$B:rw" acl
as_b sh -c 'echo b >> acl'
as_a setfacl -m m::r acl
as_b sh -c 'echo b >> acl'
as_a setfacl -x "u:$B" acl
as_a setfacl -m "g:$G:r" acl
as_b cat acl
as_bg cat acl
as_a mkdir acldir
as_a chmod 700 acldir
as_b touch acldir/b
as_a setfacl -m "u:$B:rwx" acldir
as_b touch acldir/b
as_b ls acldir
getfacl -cpn acl acldir

step set-group-ID directories
as_a mkdir sg
as_ag chgrp "$G" sg
as_ag chmod 2777 sg
as_b touch sg/b-file
as_b mkdir sg/b-dir
as_b mkdir -m 755 sg/b-dir755
as_b perl -MFcntl -e 'umask 0; sysopen(my $f, $ARGV[0], O_CREAT|O_WRONLY, 02775) or die "$!\n"' sg/b-sgid
as_bg perl -MFcntl -e 'umask 0; sysopen(my $f, $ARGV[0], O_CREAT|O_WRONLY, 02775) or die "$!\n"' sg/bg-sgid
as_b perl -e 'umask 0; mkdir($ARGV[0], 0777) or die "$!\n"' sg/b-dir777
as_b chmod 2775 sg/b-file
as_b mkdir sg/b-dir/deeper
show sg sg/*
as_b chmod g-s sg/b-dir
as_b chmod g+s sg/b-dir
show sg/b-dir

step user.* and trusted.* xattrs
as_a mkfifo fifo
as_a ln -s d755/pub sym
as_a setfattr -n user.k -v a-pub d755/pub
as_a setfattr -n user.k -v a-priv d755/priv
as_b getfattr -n user.k d755/pub
as_b getfattr -n user.k d755/priv
as_b setfattr -n user.k -v b d755/pub
as_b setfattr -x user.k d755/pub
as_b setfattr -n user.k -v b d777/open
as_b getfattr -n user.k d777/open
as_b setfattr -x user.k d777/open
as_b setfattr -n user.k -v b d1777/open
as_b setfattr -n user.k -v b d1777
as_b setfattr -n user.k -v b d777
as_a setfattr -n user.k -v a d1777
as_b getfattr -n user.k d1777
as_b setfattr -x user.k d1777
as_a setfattr -x user.k d1777
as_b getfattr -n user.k d700/pub
as_a setfattr -n user.k -v a fifo
as_a getfattr -n user.k fifo
as_a setfattr -h -n user.k -v a sym
setfattr -n trusted.t -v root d777/open
as_root getfattr -n trusted.t d777/open
as_a setfattr -n trusted.t -v a d777/open
as_a getfattr -n trusted.t d777/open
as_b setfattr -x trusted.t d777/open
as_b setfattr -n user.k -v b2 d777/open
as_b getfattr -d -m - d777/open | sort
as_root getfattr -d -m - d777/open | sort

step chattr and lsattr by the owner, by others, by root
as_a sh -c 'echo flags > fl && chmod 666 fl'
as_a lsattr fl
as_b lsattr fl
as_b lsattr d755/priv
as_b lsattr d700/pub
as_a chattr +d fl
as_a lsattr fl
as_b chattr -d fl
as_b chattr +d d777/open
as_a chattr -d fl
as_a chattr +d d1777
as_b chattr -d d1777
as_a lsattr -d d1777
as_a chattr +i fl
as_a chattr +a fl
as_a chattr +j fl
as_b xfs_io -c 'chattr +d' fl
as_a xfs_io -c 'chattr +i' fl
as_a xfs_io -c 'chattr +a' fl
as_a xfs_io -c 'chattr +d' -c 'lsattr' fl
as_a xfs_io -c 'chattr -d' fl
as_a chattr +d fl
as_root chattr +i fl
as_a lsattr fl
as_a chattr -i fl
as_a chattr -d fl
as_root chattr -d fl
as_a lsattr fl
as_a sh -c 'echo a >> fl'
as_b sh -c 'echo b >> fl'
as_a truncate -s 0 fl
as_a touch fl
as_b touch fl
as_a touch -d '2001-02-03 04:05:06 UTC' fl
as_a chmod 600 fl
as_a chown "$A" fl
as_a setfattr -n user.x -v a fl
as_a mv fl fl-moved
as_a ln fl fl-linked
as_a rm -f fl
as_root chattr -i fl
as_root chattr +a fl
as_b sh -c 'echo appended >> fl'
as_b sh -c 'echo over > fl'
as_b truncate -s 0 fl
as_a chattr -a fl
as_a rm -f fl
as_root chattr -a fl
as_a rm -f fl
as_a mkdir imm
as_root chattr +i imm
as_a touch imm/x
as_a chattr -i imm
as_root chattr -i imm
as_a touch imm/x

step what is left
cd ..
find top | sort | while read -r p; do show "$p"; done
for p in $(find top -type f | sort); do echo "$p: $(cat "$p" 2>&1)"; done
find top | sort | xargs -d '\n' getfacl -pn 2>/dev/null | grep -v '^$'
"#;

/// Run `script` as root with the mount point as `$1` and the users' ids in the
/// environment: its output and errors.
fn run_script(script: &str, dir: &Path, u: &Users) -> String {
    let out = run(Command::new("bash")
        .arg("-c")
        .arg(script)
        .arg("bash")
        .arg(dir)
        .env("A", u.a.to_string())
        .env("AG", u.a_gid.to_string())
        .env("B", u.b.to_string())
        .env("BG", u.b_gid.to_string())
        .env("G", u.g.to_string()));
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s
}

fn tools_ready(test: &str) -> Option<Users> {
    if !fuse_ready(test) {
        return None;
    }
    for tool in [
        "setfacl", "getfacl", "setfattr", "getfattr", "chattr", "lsattr", "xfs_io", "perl",
    ] {
        if !Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .is_ok_and(|o| o.status.success())
        {
            skip(
                test,
                &format!("{tool} not installed (packages acl, attr, e2fsprogs, xfsprogs, perl)"),
            );
            return None;
        }
    }
    Users::get(test)
}

#[test]
fn two_users_on_a_user_mount_as_on_kernel_ext4() {
    let test = "two_users_on_a_user_mount_as_on_kernel_ext4";
    let Some(u) = tools_ready(test) else {
        return;
    };
    let _conf = UserAllowOther::new();
    let t = u.a_dir("lanefs-users-");
    let (img, kimg) = (t.path().join("l.img"), t.path().join("k.img"));
    mkfs(&img, "64M", &[]);
    mkfs(&kimg, "64M", &[]);

    // Kernel ext4, loop-mounted by root.
    let kdir = t.path().join("k");
    std::fs::create_dir(&kdir).unwrap();
    let out = run(Command::new("mount")
        .args(["-t", "ext4", "-o", "loop"])
        .arg(&kimg)
        .arg(&kdir));
    assert!(
        out.status.success(),
        "kernel mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = run_script(USERS_SCRIPT, &kdir, &u);
    let _ = run(Command::new("umount").arg(&kdir));

    // lanefs, mounted by lanefs-a with allow_other (the daemon runs as lanefs-a).
    let m = u.mount_as_a(&img, &t.path().join("mnt"), "allow_other");
    let opts = super_options(&m.dir).unwrap_or_default();
    let got = run_script(USERS_SCRIPT, &m.dir, &u);
    m.umount();
    assert!(
        want.contains("secret-700")
            && want.contains("Permission denied")
            && want.contains("Operation not permitted"),
        "the script did not run as planned on the kernel:\n{want}"
    );
    assert!(
        got == want,
        "lanefs mounted by lanefs-a (-) and kernel ext4 (+) differ:\n{}\nlanefs's whole output:\n{got}",
        line_diff(&got, &want)
    );
    assert!(
        opts.contains("default_permissions") && opts.contains(&format!("user_id={}", u.a)),
        "mounted by lanefs-a with allow_other: {opts}"
    );
    e2fsck_clean(&img);
    e2fsck_clean(&kimg);
}

/// `default_permissions` comes with `allow_other` and `allow_root` whoever mounts, and
/// only then: a mount by a user without either is reached by that user alone (the
/// kernel refuses everyone else, root included), who is then not held to mode bits.
#[test]
fn other_users_bring_default_permissions() {
    let test = "other_users_bring_default_permissions";
    let Some(u) = tools_ready(test) else {
        return;
    };
    let _conf = UserAllowOther::new();
    let t = u.a_dir("lanefs-users-opts-");
    let img = t.path().join("a.img");
    mkfs(&img, "64M", &[]);
    let dir = t.path().join("mnt");
    let has_dp = |dir: &Path| {
        let o = super_options(dir).unwrap_or_else(|| panic!("{} not mounted", dir.display()));
        o.split(',').any(|x| x == "default_permissions")
    };
    let sh = |cmd: &mut Command| {
        let out = run(cmd);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let as_b = |args: &[&str]| {
        sh(Command::new("setpriv")
            .arg(format!("--reuid={}", u.b))
            .arg(format!("--regid={}", u.b_gid))
            .arg("--clear-groups")
            .args(args))
    };
    let path = |m: &Mount, p: &str| m.path(p).display().to_string();

    // Root, allow_root (and allow_other, as before).
    for opts in ["allow_root", "allow_other"] {
        let m = Mount::new(&img, &dir, opts);
        assert!(
            has_dp(&m.dir),
            "root, -o {opts}: {:?}",
            super_options(&m.dir)
        );
        m.umount();
    }
    // Root without either: as before, no kernel checks and only root reaches it.
    let m = Mount::new(&img, &dir, "");
    assert!(
        !has_dp(&m.dir),
        "root, no option: {:?}",
        super_options(&m.dir)
    );
    std::fs::create_dir(m.path("top")).unwrap();
    std::os::unix::fs::chown(m.path("top"), Some(u.a), Some(u.a_gid)).unwrap();
    let (ok, msg) = as_b(&["ls", &path(&m, "top")]);
    assert!(!ok, "lanefs-b on root's private mount: {msg}");
    m.umount();

    // lanefs-a with allow_other and with allow_root: the kernel checks, so lanefs-a
    // cannot read a 000 file of its own through its own mount.
    for opts in ["allow_other", "allow_root"] {
        let m = u.mount_as_a(&img, &dir, opts);
        assert!(
            has_dp(&m.dir),
            "lanefs-a, -o {opts}: {:?}",
            super_options(&m.dir)
        );
        let f = path(&m, &format!("top/zero-{opts}"));
        let (ok, msg) =
            sh(u.as_a()
                .args(["sh", "-c", &format!("echo x > {f}; chmod 000 {f}; cat {f}")]));
        assert!(
            !ok && msg.contains("Permission denied"),
            "lanefs-a reading its own 000 file, -o {opts}: {msg}"
        );
        let (ok, msg) = as_b(&["ls", &path(&m, "top")]);
        assert_eq!(ok, opts == "allow_other", "lanefs-b, -o {opts}: {msg}");
        m.umount();
    }

    // lanefs-a with neither: only lanefs-a reaches the mount, and reads its 000 file
    // (it owns the image's bytes anyway); root and lanefs-b are refused by the kernel.
    let m = u.mount_as_a(&img, &dir, "");
    assert!(
        !has_dp(&m.dir),
        "lanefs-a, no option: {:?}",
        super_options(&m.dir)
    );
    let f = path(&m, "top/zero-private");
    let (ok, msg) = sh(u.as_a().args([
        "sh",
        "-c",
        &format!("echo mine > {f}; chmod 000 {f}; cat {f}"),
    ]));
    assert!(
        ok && msg == "mine\n",
        "lanefs-a reading its own 000 file: {msg}"
    );
    let (ok, msg) = sh(Command::new("ls").arg(&m.dir));
    assert!(
        !ok && msg.contains("Permission denied"),
        "root on lanefs-a's private mount: {msg}"
    );
    let (ok, msg) = as_b(&["ls", &path(&m, "top")]);
    assert!(
        !ok && msg.contains("Permission denied"),
        "lanefs-b on lanefs-a's private mount: {msg}"
    );
    u.umount_as_a(m);
    e2fsck_clean(&img);
}
