//! Copying between a rank's data and the shared slots at full speed
//! whatever their alignment.
//!
//! glibc's `memcpy` copies blocks from a few KiB up with `rep movsb`, which
//! on AMD Zen 3 runs at a fifteenth of its speed (about 2 instead of 30 GB/s,
//! measured on this project's benchmark VM) when the destination starts 1 to
//! 47 bytes past the source modulo 4 KiB. A `Vec` of 128 KiB or more, which
//! malloc maps 16 bytes into a page, sits just so against the page-aligned
//! slots. Smaller blocks glibc copies with vector loops, at full speed
//! whatever the offsets, so [`copy`] hands it one small piece at a time.

/// Bytes per `memcpy` call: below glibc's threshold for `rep movsb`.
const PIECE: usize = 2 << 10;

/// `dst.copy_from_slice(src)`, in pieces of [`PIECE`] bytes.
pub(super) fn copy<T: Copy>(dst: &mut [T], src: &[T]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy between slices of unequal length"
    );
    let piece = (PIECE / std::mem::size_of::<T>()).max(1);
    for (d, s) in dst.chunks_mut(piece).zip(src.chunks(piece)) {
        d.copy_from_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_element_at_every_length() {
        for len in [0, 1, 511, 512, 513, 5000] {
            let src: Vec<u32> = (0..len as u32).collect();
            let mut dst = vec![0u32; len];
            copy(&mut dst, &src);
            assert_eq!(dst, src);
        }
    }
}
