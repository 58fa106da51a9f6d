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
    let opts = populate::fill_options(clamp);
    let result = crate::session::with_fs_opts(image, opts, |fs| {
        let ctx = Ctx {
            fs,
            progress: &progress,
            clamp,
            flags: crate::copy::Flags::default(),
            over,
        };
        walk(ctx, |copier| {
            write::Build::new(copier, members, shown, image_shown).run()
        })
    });
    progress.finish();
    result.map(|_| ())
}
