//! tf.data-style shuffling through a bounded buffer: fill the buffer, emit a
//! random element, refill its slot with the next row. A buffer at least as
//! large as the shard is a full shuffle.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// `rows` in the order a shuffle buffer of `buffer` rows gives.
pub fn shuffle(rows: &[usize], buffer: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let buffer = buffer.max(1);
    let mut out = Vec::with_capacity(rows.len());
    let mut pending: Vec<usize> = rows.iter().take(buffer).copied().collect();
    let mut next = pending.len();
    while !pending.is_empty() {
        let pick = rng.gen_range(0..pending.len());
        out.push(pending[pick]);
        if next < rows.len() {
            pending[pick] = rows[next];
            next += 1;
        } else {
            pending.swap_remove(pick);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn emits_every_row_once_and_a_small_buffer_stays_local() {
        let rows: Vec<usize> = (0..1000).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut full = shuffle(&rows, 5000, &mut rng);
        assert_ne!(full, rows);
        full.sort_unstable();
        assert_eq!(full, rows);
        // With a buffer of 10, row i can only come out once row i - 10 has been read.
        let local = shuffle(&rows, 10, &mut rng);
        assert!(local.iter().enumerate().all(|(pos, &row)| row <= pos + 10));
        let mut sorted = local.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, rows);
    }
}
