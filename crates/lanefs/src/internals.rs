//! The engine's layers, one module per mechanism: public for the `lanefs` command, the
//! benchmarks and the tests, which reach below [`Fs`](crate::Fs) (on-disk structures,
//! lock statistics, the lock-free parts the loom and shuttle models drive). **No
//! stability promise**: names and signatures here change with the engine. An embedder
//! needs only what the crate root exports.
//!
//! What each module owns is in `docs/design.md`'s "Modules" table. The layers nothing outside the
//! crate reaches (block mapping, directories, exclusive access, multi-mount protection)
//! are not here at all.
//!
//! The modules are declared here rather than at the crate root so that this is their only
//! public path (`lanefs::internals::disk`, never `lanefs::disk`); the crate root imports
//! them back (`pub(crate) use internals::disk`), so the engine itself names them
//! `crate::disk` as before. `#[path]` keeps their files where they always were. One
//! consequence: a file loaded by `#[path]` looks for its own out-of-line child modules
//! beside itself, so a child of a single-file layer (`mod x;` in `icache.rs`) would be
//! `src/x.rs`; give it a `#[path]` too, or make the layer a directory with a `mod.rs`.

#[path = "alloc/mod.rs"]
pub mod alloc;
#[path = "buf.rs"]
pub mod buf;
#[path = "dirty.rs"]
pub mod dirty;
#[path = "disk/mod.rs"]
pub mod disk;
#[path = "extmap.rs"]
pub mod extmap;
#[path = "hint.rs"]
pub mod hint;
#[path = "ialloc.rs"]
pub mod ialloc;
#[path = "icache.rs"]
pub mod icache;
#[path = "inode.rs"]
pub mod inode;
#[path = "journal/mod.rs"]
pub mod journal;
#[path = "leafdigest.rs"]
pub mod leafdigest;
#[path = "numhash.rs"]
pub mod numhash;
#[path = "page/mod.rs"]
pub mod page;
#[path = "rtalloc/mod.rs"]
pub mod rtalloc;
#[path = "sync/mod.rs"]
pub mod sync;
#[path = "usegate.rs"]
pub mod usegate;
