//! `mkfs -d ARCHIVE`: filling the image mkfs just made from a tar archive (a file, or
//! standard input), plain or compressed with gzip, zstd or xz, keeping what the archive
//! says rather than what the host would allow: owners and groups by number, modes with
//! their set-ID and sticky bits, times to the nanosecond, hard links, symlinks, device
//! nodes and FIFOs, xattrs and ACLs, and sparse files' holes. No user needs privileges for
//! it: nothing is made on the host.
//!
//! Reading (`input`: the bytes and their compression; `members`, `pax`, `sparse`, `acl`:
//! the stream of members) is apart from writing (`write`), so that a pre-pass can walk an
//! archive's members alone.

mod acl;
mod input;
mod members;
mod pax;
mod sparse;
mod write;

use super::*;
pub use input::Archive;
use std::io::Read;

/// Fill the root of the just-formatted image `image` from `archive`, with `clamp` and the
/// overrides as [`populate`](super::populate) takes them. A member that would leave the
/// root, a malformed or truncated archive, an unsupported member type: an error naming
/// the member, in one line.
pub fn populate_archive(
    image: &Path,
    archive: Archive,
    clamp: Option<i64>,
    over: &Overrides,
) -> CmdResult<()> {
    let progress = match archive.total {
        Some(total) if Progress::wanted() => Progress::new(total),
        _ => Progress::hidden(),
    };
    let image_shown = format!("{}:/", image.display());
    let Archive {
        shown,
        stream,
        rest,
        ..
    } = archive;
    let members = members::Members::new(stream.chain(rest));
    let fill = populate::Fill {
        clamp,
        over,
        budget: None,
        lend: None,
    };
    populate::fill_image(image, fill, progress, |copier| {
        write::Build::new(copier, members, shown, image_shown).run()
    })
}

/// Standard input (`-`), or a pipe, FIFO or device, copied into an unnamed scratch file
/// (in the temporary directory, or in memory where that cannot make one), so that an
/// archive that cannot be read twice can be:
/// counted for `--size min`, then built. The path to read it by (in /proc) and the file,
/// which must stay open meanwhile.
pub fn keep_source(src: &Path) -> std::io::Result<(PathBuf, File)> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(std::env::temp_dir(), flags, Mode::from_raw_mode(0o600)) {
        Ok(fd) => fd,
        Err(_) => rustix::fs::memfd_create("lanefs-stdin", rustix::fs::MemfdFlags::CLOEXEC)?,
    };
    let mut file = File::from(fd);
    if src.as_os_str() == "-" {
        std::io::copy(&mut std::io::stdin().lock(), &mut file)?;
    } else {
        std::io::copy(&mut File::open(src)?, &mut file)?;
    }
    let path = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&file)
    ));
    Ok((path, file))
}

/// What the archive at `path` needs of a file system (`mkfs --size min`), counted from
/// its members as the build makes them: every name in its directory (parents the
/// archive does not list made as the build makes them), an inode for each member but a
/// hard link, each file's data segments, each symlink's target, each member's xattrs;
/// then the names the device table adds. A later member of a name already seen is
/// counted again (an upper bound: the build replaces the earlier one).
pub fn measure_archive(path: &Path, over: &Overrides) -> CmdResult<lanefs::mkfs::TreeNeeds> {
    let stdin = path.starts_with("/proc/self/fd");
    let Archive {
        shown,
        stream,
        rest,
        ..
    } = Archive::open_as(path, stdin)?;
    let mut members = members::Members::new(stream.chain(rest));
    let mut needs = lanefs::mkfs::TreeNeeds::new();
    let mut dirs: HashMap<Vec<u8>, usize> = HashMap::from([(Vec::new(), 0)]);
    let fail = |p: members::Problem| Failure::new(&shown, Error::Msg(p.to_string()));
    while let Some(m) = members.next().map_err(fail)? {
        let sizes = m.xattrs.iter().map(|(k, v)| (k.len(), v.len()));
        if m.path.is_empty() {
            needs.xattrs(sizes);
            continue;
        }
        let (parent, name) = match m.path.iter().rposition(|&c| c == b'/') {
            Some(i) => (&m.path[..i], &m.path[i + 1..]),
            None => (&m.path[..0], &m.path[..]),
        };
        let dir = dir_index(parent, &mut dirs, &mut needs);
        if matches!(m.kind, members::Kind::Directory) && dirs.contains_key(&m.path) {
            needs.xattrs(sizes);
            continue; // its attributes again
        }
        needs.entry(dir, name.len());
        if let members::Kind::HardLink(_) = m.kind {
            continue;
        }
        needs.inode();
        needs.xattrs(sizes);
        match &m.kind {
            members::Kind::Directory => {
                let index = needs.dir();
                dirs.insert(m.path.clone(), index);
            }
            members::Kind::Regular => needs.file(m.segments.clone()),
            members::Kind::Symlink(target) => needs.symlink(target.len()),
            _ => {}
        }
    }
    if let Some(root) = over.root_node() {
        table_names(root, Vec::new(), &mut dirs, &mut needs);
    }
    Ok(needs)
}

/// The index in `needs` of directory `path`, counting it (and each parent the archive
/// did not list) as the build makes them.
fn dir_index(
    path: &[u8],
    dirs: &mut HashMap<Vec<u8>, usize>,
    needs: &mut lanefs::mkfs::TreeNeeds,
) -> usize {
    if let Some(&i) = dirs.get(path) {
        return i;
    }
    let (parent, name) = match path.iter().rposition(|&c| c == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&path[..0], path),
    };
    let up = dir_index(parent, dirs, needs);
    needs.entry(up, name.len());
    needs.inode();
    let i = needs.dir();
    dirs.insert(path.to_vec(), i);
    i
}

/// Count the device table's paths the archive did not have (directories among them by
/// `dirs`; other listed paths are counted as new names: an upper bound).
fn table_names(
    node: &crate::devtable::Node,
    path: Vec<u8>,
    dirs: &mut HashMap<Vec<u8>, usize>,
    needs: &mut lanefs::mkfs::TreeNeeds,
) {
    for (name, child) in &node.children {
        let mut p = path.clone();
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        let is_dir = child
            .line
            .as_ref()
            .is_none_or(|l| l.kind == FileType::Directory);
        if is_dir {
            dir_index(&p, dirs, needs);
        } else {
            let parent = dir_index(&path, dirs, needs);
            needs.entry(parent, name.len());
            needs.inode();
        }
        table_names(child, p, dirs, needs);
    }
}
