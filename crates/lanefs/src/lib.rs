//! lanefs: an ext4 engine in user space where concurrent operations meet on no global lock.
#![deny(unsafe_code)]

pub mod alloc;
pub mod bmap;
pub mod buf;
pub mod crashdev;
pub mod dev;
pub mod dir;
pub mod dirty;
pub mod disk;
pub mod error;
pub mod exclusive;
pub mod extmap;
pub mod fs;
pub mod fsck;
pub mod ialloc;
pub mod icache;
pub mod info;
pub mod inode;
pub mod journal;
pub mod mkfs;
pub mod mmp;
pub mod page;
pub mod rtalloc;
pub mod sync;
pub mod types;
pub mod usegate;

pub use crashdev::CrashDevice;
pub use dev::{BlockDevice, FileDevice, MemDevice};
pub use error::{Error, Result};
pub use fs::{Fs, MountOptions, StreamGoal};
pub use types::*;
