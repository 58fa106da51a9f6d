//! POSIX ACLs: their on-disk form (ext4's `ext4_acl_header` entries) and the VFS's xattr
//! form, converted both ways and checked as the kernel checks them, and what an ACL
//! makes of a mode (and a mode of an ACL) at create and chmod.

use crate::disk::{le16, le32};
use crate::error::{Error, Result};

/// POSIX ACL entry tags.
pub mod acl {
    /// The owner.
    pub const USER_OBJ: u16 = 0x01;
    /// A named user.
    pub const USER: u16 = 0x02;
    /// The owning group.
    pub const GROUP_OBJ: u16 = 0x04;
    /// A named group.
    pub const GROUP: u16 = 0x08;
    /// The mask.
    pub const MASK: u16 = 0x10;
    /// Everyone else.
    pub const OTHER: u16 = 0x20;
}

/// One ACL entry: tag, permission bits (rwx), id (named entries only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclEntry {
    /// `acl::*` tag.
    pub tag: u16,
    /// rwx bits.
    pub perm: u16,
    /// User or group id of a named entry (0 otherwise).
    pub id: u32,
}

/// Version of the VFS's xattr form (`posix_acl_xattr_header`).
const VFS_ACL_VERSION: u32 = 2;
/// Version of ext4's on-disk form (`ext4_acl_header`).
const EXT4_ACL_VERSION: u32 = 1;

/// Check an ACL as posix_acl_valid does: one owner, owning group and other; named
/// entries in increasing id order; a mask whenever there are named entries; tags in order.
pub fn acl_valid(acl: &[AclEntry]) -> Result<()> {
    let bad = |why: &str| Err(Error::Invalid(format!("POSIX ACL: {why}")));
    let mut state = acl::USER_OBJ;
    let mut last_id: Option<u32> = None;
    let mut needs_mask = false;
    let mut has_mask = false;
    for e in acl {
        if e.perm & !0o7 != 0 {
            return bad("permission bits beyond rwx");
        }
        match e.tag {
            acl::USER_OBJ if state == acl::USER_OBJ => state = acl::USER,
            acl::USER if state == acl::USER => {
                if last_id.is_some_and(|l| e.id <= l) {
                    return bad("named users out of order");
                }
                last_id = Some(e.id);
                needs_mask = true;
            }
            acl::GROUP_OBJ if state == acl::USER => {
                state = acl::GROUP;
                last_id = None;
            }
            acl::GROUP if state == acl::GROUP => {
                if last_id.is_some_and(|l| e.id <= l) {
                    return bad("named groups out of order");
                }
                last_id = Some(e.id);
                needs_mask = true;
            }
            acl::MASK if state == acl::GROUP => {
                state = acl::OTHER;
                has_mask = true;
            }
            acl::OTHER if state == acl::OTHER || (state == acl::GROUP && !needs_mask) => {
                state = 0;
            }
            _ => return bad("entries missing, repeated or out of order"),
        }
    }
    if state != 0 {
        return bad("no entry for others");
    }
    if needs_mask && !has_mask {
        return bad("named entries without a mask");
    }
    Ok(())
}

/// Decode the VFS form (what getxattr/setxattr carry).
pub fn acl_from_vfs(v: &[u8]) -> Result<Vec<AclEntry>> {
    if v.len() < 4 || !(v.len() - 4).is_multiple_of(8) || le32(v, 0) != VFS_ACL_VERSION {
        return Err(Error::Invalid("POSIX ACL: bad header or length".into()));
    }
    let acl: Vec<AclEntry> = v[4..]
        .chunks_exact(8)
        .map(|c| {
            let tag = le16(c, 0);
            let named = tag == acl::USER || tag == acl::GROUP;
            AclEntry {
                tag,
                perm: le16(c, 2),
                id: if named { le32(c, 4) } else { 0 },
            }
        })
        .collect();
    acl_valid(&acl)?;
    Ok(acl)
}

/// Encode the VFS form (unnamed entries carry id -1, as the kernel returns them).
pub fn acl_to_vfs(acl: &[AclEntry]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + 8 * acl.len());
    v.extend_from_slice(&VFS_ACL_VERSION.to_le_bytes());
    for e in acl {
        let named = e.tag == acl::USER || e.tag == acl::GROUP;
        v.extend_from_slice(&e.tag.to_le_bytes());
        v.extend_from_slice(&e.perm.to_le_bytes());
        v.extend_from_slice(&(if named { e.id } else { u32::MAX }).to_le_bytes());
    }
    v
}

/// Decode ext4's on-disk form: short entries (tag, perm) for the unnamed tags, long ones
/// (tag, perm, id) for named users and groups.
pub fn acl_from_disk(v: &[u8], at: u64) -> Result<Vec<AclEntry>> {
    let bad = |why: &str| Error::corrupt("POSIX ACL", at, why.to_string());
    if v.len() < 4 || le32(v, 0) != EXT4_ACL_VERSION {
        return Err(bad("bad header"));
    }
    let mut out = Vec::new();
    let mut off = 4;
    while off < v.len() {
        if off + 4 > v.len() {
            return Err(bad("truncated entry"));
        }
        let (tag, perm) = (le16(v, off), le16(v, off + 2));
        let id = if tag == acl::USER || tag == acl::GROUP {
            if off + 8 > v.len() {
                return Err(bad("truncated named entry"));
            }
            let id = le32(v, off + 4);
            off += 8;
            id
        } else {
            off += 4;
            0
        };
        out.push(AclEntry { tag, perm, id });
    }
    Ok(out)
}

/// Encode ext4's on-disk form.
pub fn acl_to_disk(acl: &[AclEntry]) -> Vec<u8> {
    let mut v = EXT4_ACL_VERSION.to_le_bytes().to_vec();
    for e in acl {
        v.extend_from_slice(&e.tag.to_le_bytes());
        v.extend_from_slice(&e.perm.to_le_bytes());
        if e.tag == acl::USER || e.tag == acl::GROUP {
            v.extend_from_slice(&e.id.to_le_bytes());
        }
    }
    v
}

/// The permission bits an access ACL gives the mode (owner, mask or group, other), and
/// whether the mode says all the ACL says (posix_acl_equiv_mode: no named entries and no
/// mask; an ACL with a mask is kept as an attribute even when it names no one, as ext4
/// keeps it).
pub fn acl_mode(acl: &[AclEntry]) -> (u16, bool) {
    let (mut mode, mut equiv) = (0u16, true);
    for e in acl {
        match e.tag {
            acl::USER_OBJ => mode |= (e.perm & 7) << 6,
            acl::GROUP_OBJ => mode |= (e.perm & 7) << 3,
            acl::MASK => {
                mode = (mode & !0o070) | ((e.perm & 7) << 3);
                equiv = false;
            }
            acl::OTHER => mode |= e.perm & 7,
            _ => equiv = false,
        }
    }
    (mode, equiv)
}

/// A directory's default ACL turned into a new inode's access ACL, and the new inode's
/// permission bits (posix_acl_create_masq): each of owner, mask (or owning group without
/// one) and other keeps only what both the ACL and the requested `mode` grant. Returns
/// the ACL, the new mode (type and special bits kept), and whether the ACL says more than
/// the mode (named entries or a mask), which is when it is stored.
pub fn acl_create_masq(default: &[AclEntry], mode: u16) -> (Vec<AclEntry>, u16, bool) {
    let mut acl = default.to_vec();
    let mut m = mode & 0o777;
    let mut not_equiv = false;
    let (mut group_obj, mut mask) = (None, None);
    for (i, e) in acl.iter_mut().enumerate() {
        match e.tag {
            acl::USER_OBJ => {
                e.perm &= (m >> 6) & 7;
                m &= (e.perm << 6) | !0o700;
            }
            acl::USER | acl::GROUP => not_equiv = true,
            acl::GROUP_OBJ => group_obj = Some(i),
            acl::OTHER => {
                e.perm &= m & 7;
                m &= e.perm | !0o007;
            }
            acl::MASK => {
                mask = Some(i);
                not_equiv = true;
            }
            _ => {}
        }
    }
    if let Some(g) = mask.or(group_obj) {
        let e = &mut acl[g];
        e.perm &= (m >> 3) & 7;
        m &= (e.perm << 3) | !0o070;
    }
    debug_assert_eq!(m & !0o777, 0);
    (acl, (mode & !0o777) | m, not_equiv)
}

/// An access ACL brought in line with a new `mode` (posix_acl_chmod_masq): owner and
/// other take the mode's bits, and the mask (or the owning group without one) the group
/// bits; named entries keep theirs.
pub fn acl_chmod_masq(access: &[AclEntry], mode: u16) -> Vec<AclEntry> {
    let mut acl = access.to_vec();
    let has_mask = acl.iter().any(|e| e.tag == acl::MASK);
    for e in acl.iter_mut() {
        match e.tag {
            acl::USER_OBJ => e.perm = (mode >> 6) & 7,
            acl::OTHER => e.perm = mode & 7,
            acl::MASK => e.perm = (mode >> 3) & 7,
            acl::GROUP_OBJ if !has_mask => e.perm = (mode >> 3) & 7,
            _ => {}
        }
    }
    acl
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ent(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }

    #[test]
    fn acl_create_masq_as_the_kernel() {
        use acl::*;
        // Three entries: the mode is the default ACL masked by the requested mode, and
        // nothing needs storing.
        let d = [ent(USER_OBJ, 7, 0), ent(GROUP_OBJ, 5, 0), ent(OTHER, 0, 0)];
        let (a, m, store) = acl_create_masq(&d, 0o100666);
        assert_eq!(m, 0o100640);
        assert!(!store);
        assert_eq!(acl_mode(&a).0, 0o640);
        // A named user and a mask: the mask, not the owning group, takes the group bits.
        let d = [
            ent(USER_OBJ, 7, 0),
            ent(USER, 7, 1000),
            ent(GROUP_OBJ, 7, 0),
            ent(MASK, 7, 0),
            ent(OTHER, 5, 0),
        ];
        let (a, m, store) = acl_create_masq(&d, 0o40750);
        assert_eq!(m, 0o40750);
        assert!(store);
        assert_eq!(a[3], ent(MASK, 5, 0));
        assert_eq!(a[2], ent(GROUP_OBJ, 7, 0));
        assert_eq!(a[4], ent(OTHER, 0, 0));
    }

    #[test]
    fn acl_chmod_masq_as_the_kernel() {
        use acl::*;
        let a = [
            ent(USER_OBJ, 7, 0),
            ent(GROUP, 6, 50),
            ent(GROUP_OBJ, 5, 0),
            ent(MASK, 7, 0),
            ent(OTHER, 4, 0),
        ];
        let b = acl_chmod_masq(&a, 0o4710);
        assert_eq!(
            b,
            [
                ent(USER_OBJ, 7, 0),
                ent(GROUP, 6, 50),
                ent(GROUP_OBJ, 5, 0),
                ent(MASK, 1, 0),
                ent(OTHER, 0, 0),
            ]
        );
        assert_eq!(acl_mode(&b).0, 0o710);
    }

    #[test]
    fn acls_convert_and_validate() {
        use acl::*;
        let a = [
            AclEntry {
                tag: USER_OBJ,
                perm: 6,
                id: 0,
            },
            AclEntry {
                tag: USER,
                perm: 4,
                id: 1000,
            },
            AclEntry {
                tag: GROUP_OBJ,
                perm: 4,
                id: 0,
            },
            AclEntry {
                tag: MASK,
                perm: 4,
                id: 0,
            },
            AclEntry {
                tag: OTHER,
                perm: 0,
                id: 0,
            },
        ];
        acl_valid(&a).unwrap();
        assert_eq!(acl_from_vfs(&acl_to_vfs(&a)).unwrap(), a);
        assert_eq!(acl_from_disk(&acl_to_disk(&a), 0).unwrap(), a);
        assert_eq!(acl_to_disk(&a).len(), 4 + 4 * 4 + 8);
        assert_eq!(acl_mode(&a), (0o640, false));
        assert!(acl_valid(&a[1..]).is_err(), "no owner entry");
        assert!(
            acl_valid(&[a[0], a[1], a[2], a[4]]).is_err(),
            "named without mask"
        );
        let minimal = [a[0], a[2], a[4]];
        acl_valid(&minimal).unwrap();
        assert_eq!(acl_mode(&minimal), (0o640, true));
        // A mask alone makes the ACL more than the mode (posix_acl_equiv_mode).
        let masked = [a[0], a[2], a[3], a[4]];
        acl_valid(&masked).unwrap();
        assert!(!acl_mode(&masked).1);
    }
}
