//! `Superblock::decode` on any 1024 bytes (checksum resealed half the time), then every
//! accessor and the geometry it implies.
#![no_main]

use lanefs::internals::disk::{geometry::Geometry, superblock::Superblock};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 1033 {
        return;
    }
    let size = u64::from_le_bytes(data[..8].try_into().unwrap()) >> (data[8] % 64);
    let mut sb = Superblock::zeroed();
    sb.raw.copy_from_slice(&data[9..1033]);
    if data[8] & 0x80 != 0 {
        sb.update_checksum();
    }
    if let Ok(sb) = Superblock::decode(&sb.raw[..], size) {
        let geo = Geometry::from_superblock(&sb);
        for g in [0, 1, geo.groups / 2, geo.groups.saturating_sub(1)] {
            if g >= geo.groups {
                continue;
            }
            let _ = geo.base_meta(g);
            let _ = geo.gdt_block(g / geo.descs_per_block());
        }
        let _ = (
            sb.volume_name(),
            sb.backups(),
            sb.csum_seed(),
            sb.hash_seed(),
        );
    }
});
