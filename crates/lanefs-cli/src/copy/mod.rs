//! `cp`: copying files, trees, symlinks and nodes into and out of an image.

mod into;
mod out;
mod stdio;

pub use into::{
    keep_source, measure, measure_archive, populate, populate_archive, precheck, Archive, Budget,
    Overrides,
};

use crate::cli::CpArgs;
use crate::error::{CmdResult, Error, Failure};
use crate::imgpath::{check_absolute, split_image_arg, ImageArg};
use lanefs::Timespec;
use std::path::PathBuf;

/// Bytes moved per read.
const CHUNK: usize = 1 << 20;

/// All-zero runs of this size (aligned) are left as holes when writing a fresh file.
const HOLE_CHUNK: usize = 64 << 10;

/// What a copy does besides copying: replace existing files or not, print each name.
#[derive(Clone, Copy, Default)]
pub struct Flags {
    pub recursive: bool,
    pub no_clobber: bool,
    pub verbose: bool,
}

impl Flags {
    /// `'from' -> 'to'` on standard output, as `cp -v` prints it.
    fn said(&self, from: &str, to: &str) {
        if self.verbose {
            use std::io::Write;
            let line = crate::error::one_line(&format!("'{from}' -> '{to}'"));
            let _ = writeln!(std::io::stdout(), "{line}");
        }
    }
}

/// `lanefs cp`.
pub fn cp(args: &CpArgs) -> CmdResult<i32> {
    let flags = Flags {
        recursive: args.recursive,
        no_clobber: args.no_clobber,
        verbose: args.verbose,
    };
    let Some((dst, srcs)) = args.paths.split_last() else {
        return Err(Failure::new(
            "",
            Error::msg("missing source and destination"),
        ));
    };
    crate::hostsys::raise_fd_limit();
    if let Some(r) = stdio::copy(srcs, dst, flags) {
        return r;
    }
    let src_images: Vec<Option<ImageArg>> = srcs.iter().map(|s| split_image_arg(s)).collect();
    let in_image = src_images.iter().filter(|s| s.is_some()).count();
    match split_image_arg(dst) {
        Some(_) if in_image > 0 => {
            Err(Failure::new("", Error::msg("copying between images is not supported")))
        }
        Some(dst) => {
            check_absolute(&dst)?;
            let hosts: Vec<PathBuf> = srcs.iter().map(PathBuf::from).collect();
            into::copy_in(&hosts, &dst, flags)
        }
        None if in_image == 0 => Err(Failure::new(
            "",
            Error::msg("neither source nor destination is inside an image (write IMAGE:/PATH with an existing image file)"),
        )),
        None if in_image < srcs.len() => Err(Failure::new(
            "",
            Error::msg("sources must all be inside one image or all on the host"),
        )),
        None => {
            let srcs: Vec<ImageArg> = src_images.into_iter().flatten().collect();
            out::copy_out(&srcs, &PathBuf::from(dst), flags)
        }
    }
}

/// A host timestamp as an engine one.
fn timespec(sec: i64, nsec: i64) -> Timespec {
    Timespec {
        sec,
        nsec: nsec.clamp(0, 999_999_999) as u32,
    }
}

/// An xattr name for a message.
fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// The aligned `HOLE_CHUNK` pieces of `data` that are not all zero, with their offsets.
fn nonzero_pieces(data: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    data.chunks(HOLE_CHUNK)
        .enumerate()
        .map(|(i, piece)| (i * HOLE_CHUNK, piece))
        .filter(|(_, piece)| piece.iter().any(|&b| b != 0))
}

/// Fill `buf` from `read` as far as the source goes; returns the bytes read. `read` gets
/// the count of bytes already read into `buf` and the rest of `buf`.
fn read_full(
    buf: &mut [u8],
    mut read: impl FnMut(usize, &mut [u8]) -> Result<usize, Error>,
) -> Result<usize, Error> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = read(filled, &mut buf[filled..])?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_pieces_are_skipped() {
        let mut data = vec![0u8; 3 * HOLE_CHUNK + 10];
        data[HOLE_CHUNK + 5] = 1;
        data[3 * HOLE_CHUNK + 9] = 2;
        let offs: Vec<usize> = nonzero_pieces(&data).map(|(o, _)| o).collect();
        assert_eq!(offs, vec![HOLE_CHUNK, 3 * HOLE_CHUNK]);
    }

    #[test]
    fn read_full_stops_at_end() {
        let src = [7u8; 10];
        let mut pos = 0;
        let mut buf = [0u8; 16];
        let n = read_full(&mut buf, |filled, b| {
            assert_eq!(filled, pos);
            let n = b.len().min(3).min(src.len() - pos);
            b[..n].copy_from_slice(&src[pos..pos + n]);
            pos += n;
            Ok(n)
        });
        assert_eq!(n.ok(), Some(10));
    }
}
