//! Where an archive's bytes come from: a file or standard input, decompressed when its
//! first bytes say gzip, zstd or xz (the name says nothing). A thread of its own reads
//! and decompresses ahead, a few chunks at most, while the build writes the image.

use super::members::BLOCK;
use crate::error::{CmdResult, Error, Failure};
use std::io::{Cursor, Read};
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};

/// Bytes handed over at a time.
const CHUNK: usize = 1 << 20;
/// Chunks read ahead.
const AHEAD: usize = 4;

/// How an archive is compressed, by its magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
    Xz,
}

/// What the first bytes of a source say it is.
pub fn sniff(head: &[u8]) -> Result<Compression, &'static str> {
    Ok(match head {
        [0x1f, 0x8b, ..] => Compression::Gzip,
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Compression::Zstd,
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => Compression::Xz,
        [b'B', b'Z', b'h', ..] => {
            return Err("bzip2-compressed, which lanefs does not read (decompress it first)")
        }
        [0x04, 0x22, 0x4d, 0x18, ..] => {
            return Err("lz4-compressed, which lanefs does not read (decompress it first)")
        }
        _ => Compression::None,
    })
}

/// An archive opened for a build: how it is shown in messages, and its tar stream.
pub struct Archive {
    pub shown: String,
    /// The bytes of a plain file (for a progress bar), when known.
    pub total: Option<u64>,
    pub(super) stream: Cursor<Vec<u8>>,
    pub(super) rest: Chunks,
}

impl Archive {
    /// Open `path` (`-`: standard input), find its compression and check that it starts
    /// as a tar archive does, before anything is formatted.
    pub fn open(path: &Path) -> CmdResult<Archive> {
        Archive::open_as(path, path.as_os_str() == "-")
    }

    /// Open `path` as [`Archive::open`] does; `stdin`: it is (or holds a copy of)
    /// standard input, named so in messages (a path other than `-` is read as a file).
    pub fn open_as(path: &Path, stdin: bool) -> CmdResult<Archive> {
        let read_stdin = path.as_os_str() == "-";
        let shown = match stdin {
            true => "standard input".to_string(),
            false => path.display().to_string(),
        };
        let fail = |why: String| Failure::new(&shown, Error::Msg(why));
        let not = match stdin {
            true => "not a tar archive",
            false => "neither a directory nor a tar archive",
        };
        let (mut src, total): (Box<dyn Read + Send>, Option<u64>) = if read_stdin {
            (Box::new(std::io::stdin()), None)
        } else {
            let file = std::fs::File::open(path).map_err(|e| Failure::new(&shown, e))?;
            let meta = file.metadata().map_err(|e| Failure::new(&shown, e))?;
            if meta.is_dir() {
                return Err(fail("is a directory".into()));
            }
            let total = meta.is_file().then_some(meta.len());
            (Box::new(file), total)
        };
        let mut head = vec![0u8; 6];
        let n = fill(&mut *src, &mut head).map_err(|e| Failure::new(&shown, e))?;
        head.truncate(n);
        if n == 0 {
            return Err(fail(format!("empty: {not}")));
        }
        let kind = sniff(&head).map_err(|w| fail(w.into()))?;
        let raw = Cursor::new(head).chain(src);
        let decoded: Box<dyn Read + Send> = match kind {
            Compression::None => Box::new(raw),
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(
                std::io::BufReader::with_capacity(CHUNK, raw),
            )),
            Compression::Zstd => Box::new(
                zstd::stream::read::Decoder::new(raw).map_err(|e| Failure::new(&shown, e))?,
            ),
            Compression::Xz => Box::new(liblzma::read::XzDecoder::new_multi_decoder(
                std::io::BufReader::with_capacity(CHUNK, raw),
            )),
        };
        let what = match kind {
            Compression::None => "",
            Compression::Gzip => "gzip data: ",
            Compression::Zstd => "zstd data: ",
            Compression::Xz => "xz data: ",
        };
        let mut rest = Chunks::start(decoded, what);
        let mut first = vec![0u8; BLOCK];
        let got = fill(&mut rest, &mut first).map_err(|e| Failure::new(&shown, e))?;
        let total = total.filter(|_| kind == Compression::None);
        if got < BLOCK {
            return Err(fail(format!("{not} (shorter than one header)")));
        }
        if !first.iter().all(|&b| b == 0) && !super::members::checksum_ok(&first) {
            return Err(fail(format!("{not} (no tar header at its start)")));
        }
        Ok(Archive {
            shown,
            total,
            stream: Cursor::new(first),
            rest,
        })
    }
}

/// Read into `buf` until it is full or the source ends; the bytes read.
fn fill(src: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match src.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// The decompressed stream, read ahead by its own thread in chunks.
pub struct Chunks {
    rx: Receiver<std::io::Result<Vec<u8>>>,
    chunk: Cursor<Vec<u8>>,
    done: bool,
}

impl Chunks {
    /// Start reading `src` on a thread; `what` starts its errors' text.
    fn start(mut src: Box<dyn Read + Send>, what: &'static str) -> Chunks {
        let (tx, rx) = sync_channel(AHEAD);
        // Not joined: it ends at the end of its source, or when the build drops the
        // receiver (its next send fails).
        std::thread::spawn(move || loop {
            let mut buf = vec![0u8; CHUNK];
            match fill(&mut *src, &mut buf) {
                Ok(n) => {
                    buf.truncate(n);
                    let last = n < CHUNK;
                    if tx.send(Ok(buf)).is_err() || last {
                        return;
                    }
                }
                Err(e) => {
                    let e = std::io::Error::new(
                        e.kind(),
                        format!("{what}{}", crate::error::io_text(&e)),
                    );
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        });
        Chunks {
            rx,
            chunk: Cursor::new(Vec::new()),
            done: false,
        }
    }
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.chunk.read(buf)?;
            if n > 0 || buf.is_empty() || self.done {
                return Ok(n);
            }
            match self.rx.recv() {
                Ok(Ok(next)) => {
                    self.done = next.len() < CHUNK;
                    self.chunk = Cursor::new(next);
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(_) => {
                    self.done = true;
                    return Ok(0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes_decide() {
        assert_eq!(sniff(&[0x1f, 0x8b, 8, 0]), Ok(Compression::Gzip));
        assert_eq!(
            sniff(&[0x28, 0xb5, 0x2f, 0xfd, 0, 0]),
            Ok(Compression::Zstd)
        );
        assert_eq!(sniff(b"\xfd7zXZ\0"), Ok(Compression::Xz));
        assert_eq!(sniff(b"hello."), Ok(Compression::None));
        assert!(sniff(b"BZh91A").is_err());
    }

    #[test]
    fn chunks_read_a_stream_whole() {
        let data: Vec<u8> = (0..(CHUNK * 2 + 77)).map(|i| (i * 7 % 251) as u8).collect();
        let mut c = Chunks::start(Box::new(Cursor::new(data.clone())), "");
        let mut out = Vec::new();
        c.read_to_end(&mut out).expect("read");
        assert_eq!(out, data);
    }
}
