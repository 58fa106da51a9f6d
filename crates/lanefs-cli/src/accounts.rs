//! User and group names as the image itself defines them: its /etc/passwd and
//! /etc/group (an image is usually another system's root, whose names the host's own
//! databases do not know). Read once per command; a missing or unreadable file names
//! nothing, and lines that do not parse are skipped, as getpwent(3) skips them.

use crate::imgpath::resolve;
use lanefs::Fs;
use std::collections::HashMap;

/// Largest account file read (a hostile image cannot make a command read gigabytes).
const MAX_FILE: u64 = 16 << 20;

/// The image's accounts.
#[derive(Default)]
pub struct Accounts {
    /// User name -> (uid, login gid).
    users: HashMap<String, (u32, u32)>,
    /// Group name -> gid.
    groups: HashMap<String, u32>,
    /// uid -> user name (the first line naming it).
    user_names: HashMap<u32, String>,
    /// gid -> group name.
    group_names: HashMap<u32, String>,
}

impl Accounts {
    /// Read the image's /etc/passwd and /etc/group.
    pub fn of(fs: &Fs) -> Accounts {
        let mut a = Accounts::default();
        for line in lines(fs, b"/etc/passwd") {
            let f: Vec<&str> = line.split(':').collect();
            if let (Some(name), Some(uid), Some(gid)) = (f.first(), f.get(2), f.get(3)) {
                if let (Ok(uid), Ok(gid)) = (uid.parse(), gid.parse()) {
                    a.users.entry(name.to_string()).or_insert((uid, gid));
                    a.user_names.entry(uid).or_insert_with(|| name.to_string());
                }
            }
        }
        for line in lines(fs, b"/etc/group") {
            let f: Vec<&str> = line.split(':').collect();
            if let (Some(name), Some(gid)) = (f.first(), f.get(2)) {
                if let Ok(gid) = gid.parse() {
                    a.groups.entry(name.to_string()).or_insert(gid);
                    a.group_names.entry(gid).or_insert_with(|| name.to_string());
                }
            }
        }
        a
    }

    /// The uid of user `name`.
    pub fn uid(&self, name: &str) -> Option<u32> {
        self.users.get(name).map(|u| u.0)
    }

    /// The login group of user `name` (or, for a number, of the user with that uid).
    pub fn login_gid(&self, name: &str, uid: u32) -> Option<u32> {
        self.users.get(name).map(|u| u.1).or_else(|| {
            let name = self.user_names.get(&uid)?;
            self.users.get(name).map(|u| u.1)
        })
    }

    /// The gid of group `name`.
    pub fn gid(&self, name: &str) -> Option<u32> {
        self.groups.get(name).copied()
    }

    /// The name of `uid`, or the number.
    pub fn user_name(&self, uid: u32) -> String {
        self.user_names
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| uid.to_string())
    }

    /// The name of `gid`, or the number.
    pub fn group_name(&self, gid: u32) -> String {
        self.group_names
            .get(&gid)
            .cloned()
            .unwrap_or_else(|| gid.to_string())
    }
}

/// The lines of the regular file at `path` in the image (none if it is missing, not a
/// regular file, too large or unreadable).
fn lines(fs: &Fs, path: &[u8]) -> Vec<String> {
    let Ok(found) = resolve(fs, path, true) else {
        return Vec::new();
    };
    let a = &found.attr;
    if a.kind != lanefs::FileType::Regular || a.size > MAX_FILE {
        return Vec::new();
    }
    let mut buf = vec![0u8; a.size as usize];
    let mut off = 0;
    while off < buf.len() {
        match fs.read(a.ino, off as u64, &mut buf[off..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => off += n,
        }
    }
    buf.truncate(off);
    String::from_utf8_lossy(&buf)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}
