//! POSIX ACLs in the text form GNU tar (`--acls`: `SCHILY.acl.access` and
//! `SCHILY.acl.default`), star and libarchive write, turned into the VFS binary form the
//! `system.posix_acl_access` and `system.posix_acl_default` xattrs carry (what the copy of
//! a host tree reads from the host and hands the engine unchanged).
//!
//! The text is `acl_to_text`'s: entries `TAG:QUALIFIER:PERMS` separated by commas or
//! newlines, `#` comments dropped. star and libarchive add the numeric id as a fourth field
//! (`user:bob:r--:1000`), which is then what counts; otherwise a numeric qualifier is the
//! id, and a name is looked up in this host's user or group database (GNU tar writes names
//! unless `--numeric-owner`): an unknown name is an error.

use lanefs::internals::disk::xattr::{acl, acl_to_vfs, acl_valid, AclEntry};

/// The VFS binary form of ACL text `text`, entries sorted as the kernel keeps them.
pub fn from_text(text: &[u8]) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "an ACL that is not text".to_string())?;
    let mut entries = Vec::new();
    for line in text.split('\n') {
        let line = line.split('#').next().unwrap_or("");
        for entry in line.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            entries.push(entry_of(entry)?);
        }
    }
    entries.sort_by_key(|e: &AclEntry| (order(e.tag), e.id));
    acl_valid(&entries).map_err(|e| format!("ACL \"{text}\": {e}"))?;
    Ok(acl_to_vfs(&entries))
}

/// Where a tag goes in the kernel's order.
fn order(tag: u16) -> u8 {
    match tag {
        acl::USER_OBJ => 0,
        acl::USER => 1,
        acl::GROUP_OBJ => 2,
        acl::GROUP => 3,
        acl::MASK => 4,
        _ => 5,
    }
}

/// One `TAG:QUALIFIER:PERMS[:ID]` entry.
fn entry_of(entry: &str) -> Result<AclEntry, String> {
    let bad = || format!("malformed ACL entry \"{entry}\"");
    let fields: Vec<&str> = entry.split(':').collect();
    if !(3..=4).contains(&fields.len()) {
        return Err(bad());
    }
    let (tag, qual, perms) = (fields[0], fields[1], fields[2]);
    let named = !qual.is_empty();
    let tag = match (tag, named) {
        ("user" | "u", false) => acl::USER_OBJ,
        ("user" | "u", true) => acl::USER,
        ("group" | "g", false) => acl::GROUP_OBJ,
        ("group" | "g", true) => acl::GROUP,
        ("mask" | "m", false) => acl::MASK,
        ("other" | "o", false) => acl::OTHER,
        _ => return Err(bad()),
    };
    let mut perm = 0u16;
    for (i, c) in perms.bytes().enumerate() {
        perm |= match (c, i) {
            (b'r', 0) => 4,
            (b'w', 1) => 2,
            (b'x', 2) => 1,
            (b'-', 0..=2) => 0,
            _ => return Err(bad()),
        };
    }
    if perms.is_empty() {
        return Err(bad());
    }
    let id = match (named, fields.get(3)) {
        (false, _) => 0,
        (true, Some(id)) => id.parse().map_err(|_| bad())?,
        (true, None) => match qual.parse() {
            Ok(id) => id,
            Err(_) => lookup(qual, tag == acl::USER)?,
        },
    };
    Ok(AclEntry { tag, perm, id })
}

/// The id of user (`user`) or group `name` in this host's database.
fn lookup(name: &str, user: bool) -> Result<u32, String> {
    let what = if user { "user" } else { "group" };
    let unknown =
        || format!("an ACL names {what} \"{name}\", unknown here (archive with --numeric-owner)");
    let cname = std::ffi::CString::new(name).map_err(|_| unknown())?;
    let mut buf = vec![0u8; 16 << 10];
    if user {
        // SAFETY: a zeroed passwd is a valid out-parameter; getpwnam_r writes only into it
        // and `buf` (whose length it is given), and `found` points at it or is null.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: as above; `cname` is NUL-terminated and outlives the call.
        let rc = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        if rc == 0 && !found.is_null() {
            return Ok(pw.pw_uid);
        }
    } else {
        // SAFETY: a zeroed group is a valid out-parameter; getgrnam_r writes only into it
        // and `buf` (whose length it is given), and `found` points at it or is null.
        let mut gr: libc::group = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: as above; `cname` is NUL-terminated and outlives the call.
        let rc = unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                &mut gr,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        if rc == 0 && !found.is_null() {
            return Ok(gr.gr_gid);
        }
    }
    Err(unknown())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vfs(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let acl: Vec<AclEntry> = entries
            .iter()
            .map(|&(tag, perm, id)| AclEntry { tag, perm, id })
            .collect();
        acl_to_vfs(&acl)
    }

    #[test]
    fn gnu_tar_text_becomes_the_vfs_form() {
        let got =
            from_text(b"user::rw-,user:2000:r--,user:1000:rwx,group::r-x,mask::rwx,other::---");
        let want = vfs(&[
            (acl::USER_OBJ, 6, 0),
            (acl::USER, 7, 1000),
            (acl::USER, 4, 2000),
            (acl::GROUP_OBJ, 5, 0),
            (acl::MASK, 7, 0),
            (acl::OTHER, 0, 0),
        ]);
        assert_eq!(got, Ok(want));
        // star's and libarchive's fourth field, comments and newlines.
        let got = from_text(b"user::rwx\ngroup::r-x\ngroup:nobody-at-all:r--:77 #effective:r--\nmask::r-x\nother::r-x\n");
        let want = vfs(&[
            (acl::USER_OBJ, 7, 0),
            (acl::GROUP_OBJ, 5, 0),
            (acl::GROUP, 4, 77),
            (acl::MASK, 5, 0),
            (acl::OTHER, 5, 0),
        ]);
        assert_eq!(got, Ok(want));
        // A name of this host's database.
        let got = from_text(b"u::rw-,u:root:r--,g::r--,m::r--,o::r--");
        assert!(got.is_ok(), "{got:?}");
    }

    #[test]
    fn bad_text_is_refused() {
        for bad in [
            &b"user::rw-"[..],
            b"user::rw-,group::r--,other::rwz",
            b"user::rw-,group::r--,other:x:r--",
            b"user::rw-,user:5:r--,group::r--,other::r--",
            b"user::rw-,user:no-such-user-here:r--,group::r--,mask::r--,other::r--",
            b"bogus::rw-,group::r--,other::r--",
            b"user::rw-:1:2,group::r--,other::r--",
        ] {
            assert!(from_text(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
