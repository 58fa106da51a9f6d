//! Directory name hashes for htree directories: legacy, half-MD4 and TEA.

/// Hash version codes (dx_root_info.hash_version; +3 for the unsigned-char variants).
pub const LEGACY: u8 = 0;
/// half_md4
pub const HALF_MD4: u8 = 1;
/// tea
pub const TEA: u8 = 2;
/// legacy, unsigned chars
pub const LEGACY_UNSIGNED: u8 = 3;
/// half_md4, unsigned chars
pub const HALF_MD4_UNSIGNED: u8 = 4;
/// tea, unsigned chars
pub const TEA_UNSIGNED: u8 = 5;

fn str2hashbuf(msg: &[u8], num: usize, unsigned: bool, out: &mut [u32; 8]) {
    debug_assert!(num == 4 || num == 8, "hash buffer of {num} words");
    let len = msg.len() as u32;
    let mut pad = len | (len << 8);
    pad |= pad << 16;
    let mut val = pad;
    let n = msg.len().min(num * 4);
    let mut num = num as isize;
    let mut k = 0;
    for (i, &c) in msg[..n].iter().enumerate() {
        let c = if unsigned {
            u32::from(c)
        } else {
            c as i8 as i32 as u32
        };
        val = c.wrapping_add(val << 8);
        if i % 4 == 3 {
            out[k] = val;
            k += 1;
            val = pad;
            num -= 1;
        }
    }
    num -= 1;
    if num >= 0 {
        out[k] = val;
        k += 1;
    }
    while num > 0 {
        out[k] = pad;
        k += 1;
        num -= 1;
    }
    debug_assert!(k <= out.len(), "{k} hash words written");
}

fn half_md4(buf: &mut [u32; 4], inp: &[u32; 8]) {
    let f = |x: u32, y: u32, z: u32| z ^ (x & (y ^ z));
    let g = |x: u32, y: u32, z: u32| (x & y).wrapping_add((x ^ y) & z);
    let h = |x: u32, y: u32, z: u32| x ^ y ^ z;
    let (k2, k3) = (0o13240474631u32, 0o15666365641u32);
    let [mut a, mut b, mut c, mut d] = *buf;
    macro_rules! r {
        ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $x:expr, $s:expr) => {
            $a = $a
                .wrapping_add($f($b, $c, $d))
                .wrapping_add($x)
                .rotate_left($s);
        };
    }
    r!(f, a, b, c, d, inp[0], 3);
    r!(f, d, a, b, c, inp[1], 7);
    r!(f, c, d, a, b, inp[2], 11);
    r!(f, b, c, d, a, inp[3], 19);
    r!(f, a, b, c, d, inp[4], 3);
    r!(f, d, a, b, c, inp[5], 7);
    r!(f, c, d, a, b, inp[6], 11);
    r!(f, b, c, d, a, inp[7], 19);
    r!(g, a, b, c, d, inp[1].wrapping_add(k2), 3);
    r!(g, d, a, b, c, inp[3].wrapping_add(k2), 5);
    r!(g, c, d, a, b, inp[5].wrapping_add(k2), 9);
    r!(g, b, c, d, a, inp[7].wrapping_add(k2), 13);
    r!(g, a, b, c, d, inp[0].wrapping_add(k2), 3);
    r!(g, d, a, b, c, inp[2].wrapping_add(k2), 5);
    r!(g, c, d, a, b, inp[4].wrapping_add(k2), 9);
    r!(g, b, c, d, a, inp[6].wrapping_add(k2), 13);
    r!(h, a, b, c, d, inp[3].wrapping_add(k3), 3);
    r!(h, d, a, b, c, inp[7].wrapping_add(k3), 9);
    r!(h, c, d, a, b, inp[2].wrapping_add(k3), 11);
    r!(h, b, c, d, a, inp[6].wrapping_add(k3), 15);
    r!(h, a, b, c, d, inp[1].wrapping_add(k3), 3);
    r!(h, d, a, b, c, inp[5].wrapping_add(k3), 9);
    r!(h, c, d, a, b, inp[0].wrapping_add(k3), 11);
    r!(h, b, c, d, a, inp[4].wrapping_add(k3), 15);
    buf[0] = buf[0].wrapping_add(a);
    buf[1] = buf[1].wrapping_add(b);
    buf[2] = buf[2].wrapping_add(c);
    buf[3] = buf[3].wrapping_add(d);
}

fn tea(buf: &mut [u32; 4], inp: &[u32; 8]) {
    let (mut sum, mut b0, mut b1) = (0u32, buf[0], buf[1]);
    let (a, b, c, d) = (inp[0], inp[1], inp[2], inp[3]);
    for _ in 0..16 {
        sum = sum.wrapping_add(0x9E3779B9);
        b0 = b0.wrapping_add(
            ((b1 << 4).wrapping_add(a)) ^ (b1.wrapping_add(sum)) ^ ((b1 >> 5).wrapping_add(b)),
        );
        b1 = b1.wrapping_add(
            ((b0 << 4).wrapping_add(c)) ^ (b0.wrapping_add(sum)) ^ ((b0 >> 5).wrapping_add(d)),
        );
    }
    buf[0] = buf[0].wrapping_add(b0);
    buf[1] = buf[1].wrapping_add(b1);
}

fn legacy(name: &[u8], unsigned: bool) -> u32 {
    let (mut h0, mut h1) = (0x12a3fe2du32, 0x37abe8f9u32);
    for &c in name {
        let c = if unsigned {
            u32::from(c)
        } else {
            c as i8 as i32 as u32
        };
        let mut h = h1.wrapping_add(h0 ^ c.wrapping_mul(7152373));
        if h & 0x8000_0000 != 0 {
            h = h.wrapping_sub(0x7fff_ffff);
        }
        h1 = h0;
        h0 = h;
    }
    h0 << 1
}

/// (major, minor) hash of `name` with hash `version` and the superblock's `seed`.
pub fn dirhash(name: &[u8], version: u8, seed: &[u32; 4]) -> (u32, u32) {
    let mut buf = [0x67452301u32, 0xefcdab89, 0x98badcfe, 0x10325476];
    if seed.iter().any(|&w| w != 0) {
        buf = *seed;
    }
    let unsigned = version >= 3;
    let mut inp = [0u32; 8];
    let (hash, minor) = match version % 3 {
        LEGACY => (legacy(name, unsigned), 0),
        HALF_MD4 => {
            let mut p = name;
            loop {
                str2hashbuf(p, 8, unsigned, &mut inp);
                half_md4(&mut buf, &inp);
                if p.len() <= 32 {
                    break;
                }
                p = &p[32..];
            }
            (buf[1], buf[2])
        }
        _ => {
            let mut p = name;
            loop {
                str2hashbuf(p, 4, unsigned, &mut inp);
                tea(&mut buf, &inp);
                if p.len() <= 16 {
                    break;
                }
                p = &p[16..];
            }
            (buf[0], buf[1])
        }
    };
    let mut h = hash & !1;
    if h == 0x7fff_ffff << 1 {
        h = (0x7fff_ffff - 1) << 1;
    }
    (h, minor)
}
