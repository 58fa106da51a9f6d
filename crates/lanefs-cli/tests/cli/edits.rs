//! The offline edits: mv, ln [-s], chmod, chown (numbers and the image's own names),
//! touch, getfattr and setfattr, and `ls -l --names` with ACLs marked `+`; each checked
//! through the commands, and the image clean in e2fsck after.

use super::*;

/// Every edit on one image, read back by ls, stat and getfattr.
#[test]
fn edits_change_what_they_name() {
    let dir = tempdir();
    let image = new_image(dir.path());
    let p = |path: &str| at(&image, path);
    ok(lanefs(&["mkdir", "-p", &p("/etc"), &p("/srv/d")]));
    let host = dir.path().join("passwd");
    fs::write(
        &host,
        "root:x:0:0::/root:/bin/sh\nweb:x:33:34::/srv:/bin/sh\n",
    )
    .unwrap();
    ok(lanefs(&["cp", &s(&host), &p("/etc/passwd")]));
    fs::write(&host, "root:x:0:\nweb:x:34:\n").unwrap();
    ok(lanefs(&["cp", &s(&host), &p("/etc/group")]));

    // touch makes files; mv renames and moves into a directory.
    ok(lanefs(&["touch", &p("/srv/a"), &p("/srv/b")]));
    ok(lanefs(&["mv", &p("/srv/a"), &p("/srv/b"), &p("/srv/d")]));
    ok(lanefs(&["mv", &p("/srv/d/b"), &p("/srv/d/c")]));
    let listed = stdout(&ok(lanefs(&["ls", &p("/srv/d")])));
    assert_eq!(listed, "a\nc\n");
    let line = one_line_failure(&lanefs(&[
        "mv",
        &p("/srv/d/a"),
        &p("/srv/d/c"),
        &p("/srv/d/a"),
    ]));
    assert!(line.contains("not a directory"), "{line}");

    // ln: a hard link shares the inode; -s stores the text.
    ok(lanefs(&["ln", &p("/srv/d/a"), &p("/srv/hard")]));
    ok(lanefs(&["ln", "-s", "d/c", &p("/srv/sym")]));
    let long = stdout(&ok(lanefs(&["ls", "-l", &p("/srv")])));
    assert!(long.contains(" sym -> d/c\n"), "{long}");
    let line = one_line_failure(&lanefs(&["ln", &p("/srv/d/c"), &p("/srv/hard")]));
    assert!(line.contains("file exists"), "{line}");
    let line = one_line_failure(&lanefs(&["ln", "-f", &p("/srv/hard"), &p("/srv/d/a")]));
    assert!(line.contains("same file"), "{line}");
    assert!(stdout(&ok(lanefs(&["ls", &p("/srv/d")]))).contains("a\n"));

    // chown clears set-user-ID (and set-group-ID with group execute) of a file.
    ok(lanefs(&["touch", &p("/srv/suid")]));
    ok(lanefs(&["chmod", "6755", &p("/srv/suid")]));
    ok(lanefs(&["chown", "5:5", &p("/srv/suid")]));
    let stat = stdout(&ok(lanefs(&["stat", &p("/srv/suid")])));
    assert!(stat.contains("(0755/-rwxr-xr-x)"), "{stat}");

    // chmod, octal and symbolic, -R; chown by the image's names and by number.
    ok(lanefs(&["chmod", "640", &p("/srv/hard")]));
    ok(lanefs(&["chmod", "-R", "g+w", &p("/srv/d")]));
    ok(lanefs(&["chown", "web:", &p("/srv/d/c")]));
    ok(lanefs(&["chown", "-h", "7:8", &p("/srv/sym")]));
    let stat = stdout(&ok(lanefs(&["stat", &p("/srv/d/a")])));
    assert!(stat.contains("(0660/-rw-rw----)"), "{stat}");
    let stat = stdout(&ok(lanefs(&["stat", &p("/srv/d/c")])));
    assert!(stat.contains("Uid: 33  Gid: 34"), "{stat}");
    let stat = stdout(&ok(lanefs(&["stat", &p("/srv/sym")])));
    assert!(stat.contains("Uid: 7  Gid: 8"), "{stat}");
    let line = one_line_failure(&lanefs(&["chown", "nobody", &p("/srv")]));
    assert!(line.contains("no user 'nobody'"), "{line}");
    let line = one_line_failure(&lanefs(&["chmod", "u+q", &p("/srv")]));
    assert!(line.contains("invalid mode"), "{line}");

    // touch -d sets both times.
    ok(lanefs(&[
        "touch",
        "-d",
        "2009-02-13 23:31:30",
        &p("/srv/d"),
    ]));
    let stat = stdout(&ok(lanefs(&["stat", &p("/srv/d")])));
    assert!(
        stat.contains("Modify: 2009-02-13 23:31:30.000000000"),
        "{stat}"
    );
    assert!(
        stat.contains("Access: 2009-02-13 23:31:30.000000000"),
        "{stat}"
    );

    // setfattr / getfattr, and an ACL marked + by ls -l, with the image's names.
    ok(lanefs(&[
        "setfattr",
        "-n",
        "user.note",
        "-v",
        "hi there",
        &p("/srv/d/c"),
    ]));
    let mut acl = "0x02000000".to_string();
    for (tag, perm, id) in [
        (1u16, 6u16, u32::MAX),
        (2, 4, 1000),
        (4, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        for b in tag
            .to_le_bytes()
            .iter()
            .chain(&perm.to_le_bytes())
            .chain(&id.to_le_bytes())
        {
            acl += &format!("{b:02x}");
        }
    }
    ok(lanefs(&[
        "setfattr",
        "-n",
        "system.posix_acl_access",
        "-v",
        &acl,
        &p("/srv/d/c"),
    ]));
    let got = stdout(&ok(lanefs(&["getfattr", &p("/srv/d/c")])));
    assert!(got.starts_with("# file: /srv/d/c\n"), "{got}");
    assert!(got.contains("user.note=\"hi there\"\n"), "{got}");
    let long = stdout(&ok(lanefs(&["ls", "-l", "--names", &p("/srv/d")])));
    let c = long.lines().find(|l| l.ends_with(" c")).unwrap_or_default();
    assert!(c.starts_with("-rw-r-----+ 1 web  web "), "{long}");
    let stat = stdout(&ok(lanefs(&["stat", &p("/srv/d/c")])));
    assert!(
        stat.contains("   ACL: user::rw-,user:1000:r--,group::r--,mask::r--,other::---"),
        "{stat}"
    );
    ok(lanefs(&["setfattr", "-x", "user.note", &p("/srv/d/c")]));
    let line = one_line_failure(&lanefs(&["getfattr", "-n", "user.note", &p("/srv/d/c")]));
    assert!(line.contains("no such attribute"), "{line}");
    let got = stdout(&ok(lanefs(&["getfattr", &p("/srv/d/c")])));
    assert!(!got.contains("user.note"), "{got}");
    assert_clean(&image);
}

/// `cp -` reads standard input into a file, `cp IMG:/f -` writes it out, `-n` keeps what
/// is there, and `-v` names each copy.
#[test]
fn cp_streams_keeps_and_names() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempdir();
    let image = new_image(dir.path());
    let p = |path: &str| at(&image, path);
    let feed = |args: &[&str], input: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lanefs"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A command that stops reading (a full image) closes the pipe early.
        let _ = child.stdin.take().unwrap().write_all(input);
        child.wait_with_output().unwrap()
    };
    let big = random_bytes(3 << 20, 9);
    ok(feed(&["cp", "-", &p("/in")], &big));
    assert_eq!(ok(lanefs(&["cp", &p("/in"), "-"])).stdout, big);
    ok(feed(&["cp", "-n", "-", &p("/in")], b"kept?"));
    assert_eq!(ok(lanefs(&["cat", &p("/in")])).stdout, big);
    ok(feed(&["cp", "-", &p("/in")], b"short"));
    assert_eq!(ok(lanefs(&["cat", &p("/in")])).stdout, b"short");
    let line = one_line_failure(&feed(&["cp", "-", &p("/")], b"x"));
    assert!(line.contains("name the file"), "{line}");
    // More than fits: an error, and no partial file left.
    let small = dir.path().join("small.img");
    ok(lanefs(&["mkfs", &s(&small), "--size", "4M"]));
    let out = feed(&["cp", "-", &at(&small, "/big")], &random_bytes(8 << 20, 3));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no space left"), "{}", stderr(&out));
    assert!(!stdout(&ok(lanefs(&["ls", &at(&small, "/")]))).contains("big"));

    let src = dir.path().join("t");
    fs::create_dir(&src).unwrap();
    write_file(&src.join("a"), b"new", 0o644);
    ok(lanefs(&["mkdir", &p("/t")]));
    let old = dir.path().join("old");
    write_file(&old, b"old", 0o644);
    ok(lanefs(&["cp", &s(&old), &p("/t/a")]));
    let out = ok(lanefs(&["cp", "-r", "-n", "-v", &s(&src), &p("/")]));
    assert_eq!(ok(lanefs(&["cat", &p("/t/a")])).stdout, b"old");
    assert!(!stdout(&out).contains("/t/a'"), "{}", stdout(&out));
    let out = ok(lanefs(&["cp", "-r", "-v", &s(&src), &p("/")]));
    assert_eq!(ok(lanefs(&["cat", &p("/t/a")])).stdout, b"new");
    let want = format!("'{}' -> '{}'", s(&src.join("a")), p("/t/a"));
    assert!(stdout(&out).lines().any(|l| l == want), "{}", stdout(&out));
    assert_clean(&image);
}
