//! Allreduce by recursive doubling, for the small and mid-sized messages of
//! jobs beyond [`DIRECT_RANKS_MAX`] ranks: ⌈log2 N⌉ rounds, each a swap of
//! the whole buffer with one partner, so a rank talks to at most
//! log2 N + 1 peers. The direct exchange and the owners' two hops talk to
//! all N - 1, which at scale costs a link per peer and N - 1 messages a
//! call.
//!
//! Ranks from the largest power of two `p <= N` up first hand their data to
//! rank `r - p` and take the result back at the end. In round `k`, rank `r`
//! and rank `r ^ 2^k` swap what they hold and both compute
//! `lower op higher`, the lower rank's operand first.
//!
//! Invariant: the two ranks of a round hold bit-identical operands
//! afterwards (one fixed operand order, so even min/max of ±0 and NaN
//! payloads agree), hence, round by round, so do all `p` ranks, and the
//! folded ranks take their result byte for byte.

use crate::error::Result;
use crate::mesh::Mesh;
use crate::mesh::DIRECT_RANKS_MAX;
use crate::reduce::{as_bytes, as_bytes_mut, Element, ReduceOp};
use crate::tcp::pump::{transfer, Flow};
use crate::wire::Header;

const DURING: &str = "allreduce";

/// Allreduce of `data` among the ranks of `mesh` (more than
/// [`DIRECT_RANKS_MAX`]).
pub(crate) fn allreduce<T: Element>(
    mesh: &Mesh,
    data: &mut [T],
    op: ReduceOp,
    header: &Header,
) -> Result<()> {
    let (n, r) = (mesh.size(), mesh.rank());
    debug_assert!(n > DIRECT_RANKS_MAX);
    let p = 1usize << n.ilog2();
    let mut message = header.encode().to_vec();
    if r >= p {
        // Folded: hand the data in, take the result back.
        let partner = mesh.link(r - p)?;
        message.extend_from_slice(as_bytes(data));
        partner.send(&message, DURING)?;
        partner.receive_header(header, DURING)?;
        return partner.recv(as_bytes_mut(data), DURING);
    }
    let mut held = data.to_vec();
    let mut theirs = vec![T::ZERO; data.len()];
    let folded = (r + p < n).then(|| mesh.link(r + p)).transpose()?;
    if let Some(extra) = folded {
        extra.receive_header(header, DURING)?;
        extra.recv(as_bytes_mut(&mut theirs), DURING)?;
        T::reduce(&mut held, &theirs, op);
    }
    let mut distance = 1;
    while distance < p {
        let partner = r ^ distance;
        transfer(
            &mut [Flow::new(
                mesh.link(partner)?,
                Some(header),
                as_bytes(&held),
                as_bytes_mut(&mut theirs),
            )],
            DURING,
        )?;
        if r < partner {
            T::reduce(&mut held, &theirs, op);
        } else {
            T::reduce(&mut theirs, &held, op);
            std::mem::swap(&mut held, &mut theirs);
        }
        distance *= 2;
    }
    if op == ReduceOp::Average {
        T::divide(&mut held, n);
    }
    data.copy_from_slice(&held);
    if let Some(extra) = folded {
        message.extend_from_slice(as_bytes(data));
        extra.send(&message, DURING)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::collectives::on_mesh;
    use crate::reduce::ReduceOp;

    #[test]
    fn every_rank_ends_bit_identical_with_the_right_result() {
        const OPS: [ReduceOp; 5] = [
            ReduceOp::Sum,
            ReduceOp::Average,
            ReduceOp::Min,
            ReduceOp::Max,
            ReduceOp::Product,
        ];
        for size in [9, 16, 19] {
            let results = on_mesh(size, |rank, comm| {
                let mut bits = Vec::new();
                for op in OPS {
                    // Values whose float sum depends on the order, and a
                    // signed zero that differs between ranks.
                    let mut data: Vec<f32> = (0..37)
                        .map(|i| ((rank * 37 + i) as f32 * 0.7).sin() * 10f32.powi(i as i32 % 7))
                        .collect();
                    data[0] = if rank % 2 == 0 { 0.0 } else { -0.0 };
                    comm.allreduce(&mut data, op)?;
                    bits.push(data.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
                }
                // Mid-sized (100 KiB) integers: exact.
                let mut mid: Vec<i64> = (0..12_800).map(|i| i * (rank as i64 + 1)).collect();
                comm.allreduce(&mut mid, ReduceOp::Sum)?;
                Ok((bits, mid))
            });
            let results: Vec<_> = results.into_iter().map(Result::unwrap).collect();
            for (rank, result) in results.iter().enumerate() {
                assert_eq!(
                    result.0, results[0].0,
                    "size {size}: rank {rank} differs from rank 0"
                );
            }
            let triangle = (size * (size + 1) / 2) as i64;
            assert!(results[0]
                .1
                .iter()
                .enumerate()
                .all(|(i, v)| *v == i as i64 * triangle));
            let value = |rank: usize, i: usize| {
                ((rank * 37 + i) as f32 * 0.7).sin() as f64 * 10f64.powi(i as i32 % 7)
            };
            for i in 1..37 {
                let sum: f64 = (0..size).map(|r| value(r, i)).sum();
                let got = f32::from_bits(results[0].0[0][i]) as f64;
                assert!(
                    (got - sum).abs() <= 1e-4 * sum.abs().max(1.0),
                    "sum {i}: {got} vs {sum}"
                );
                let average = f32::from_bits(results[0].0[1][i]) as f64;
                assert!((average - sum / size as f64).abs() <= 1e-4 * sum.abs().max(1.0));
                let min = (0..size)
                    .map(|r| value(r, i) as f32)
                    .fold(f32::INFINITY, f32::min);
                assert_eq!(f32::from_bits(results[0].0[2][i]), min, "min {i}");
                let max = (0..size)
                    .map(|r| value(r, i) as f32)
                    .fold(f32::NEG_INFINITY, f32::max);
                assert_eq!(f32::from_bits(results[0].0[3][i]), max, "max {i}");
            }
            assert_eq!(f32::from_bits(results[0].0[2][0]), 0.0);
        }
    }
}
