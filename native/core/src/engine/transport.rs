//! What the engine needs from a transport, and its implementation on the
//! TCP [`Communicator`].
//!
//! The engine's thread drives a [`Transport`]: a bitwise AND and a
//! gather/broadcast of bytes for the control plane, and the collectives that
//! execute responses on tensor bytes. Negotiation knows nothing of sockets;
//! a transport knows nothing of negotiation.
//!
//! On a [`Communicator`] every operation is one of its own collectives:
//!
//! * the control gather is its binomial-tree gather to rank 0 and the AND
//!   its recursive doubling (`collectives::control`: log2 N peers per rank),
//!   the control broadcast its broadcast (the length first, then the bytes);
//! * through shared memory (every rank on this host) the AND packs each bit
//!   into a field wide enough to count the ranks, sums with allreduce, and
//!   keeps the fields that counted every rank (shared memory has no bitwise
//!   reduction, and the host's few ranks make the fields cheap);
//! * allreduce is `allreduce_bytes` with [`AllreduceOptions`], so scale
//!   factors and compression apply to every float type, on the fusion buffer
//!   in place;
//! * broadcast, allgather and alltoall move the tensor's bytes as `u8`
//!   (the engine has already agreed on the element type);
//! * reducescatter splits by rows, the communicator's reducescatter by
//!   elements: each rank's rows go into an equal, zero-padded block, so the
//!   element split falls on the row split, and the padding is dropped after.
//!
//! [`super::LocalTransport`] connects threads of one process instead.
//!
//! Invariant for implementors: a collective either returns `Unsupported`
//! before communicating, identically on every rank (the engine then fails
//! just that tensor and carries on), or communicates; any other error is
//! fatal to the engine.

use crate::collectives::AllreduceOptions;
use crate::communicator::Communicator;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::nccl::NcclCommunicator;
use crate::partition::segment;
use crate::reduce::{as_bytes, as_bytes_mut, Element, ReduceOp};
use crate::with_dtype;

/// The operations the engine's thread runs on; every rank calls them in the
/// same order with agreeing arguments.
pub trait Transport: Send {
    /// This rank, in `0..size`.
    fn rank(&self) -> usize;

    /// Number of ranks.
    fn size(&self) -> usize;

    /// Replaces `words` with the bitwise AND of every rank's `words` (all
    /// ranks pass the same length).
    fn bitwise_and(&mut self, words: &mut [u64]) -> Result<()>;

    /// Collects every rank's `mine` on rank 0: `Some(list in rank order)` on
    /// rank 0, `None` elsewhere.
    fn control_gather(&mut self, mine: &[u8]) -> Result<Option<Vec<Vec<u8>>>>;

    /// Rank 0's `bytes`, on every rank (other ranks' `bytes` are ignored).
    fn control_broadcast(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>>;

    /// Reduces `data` (elements of `dtype`) element-wise across ranks, in
    /// place, with the options' scale factors and compression. `data` may
    /// be unaligned. Scale factors other than 1 come only with float types.
    fn allreduce(
        &mut self,
        dtype: DataType,
        options: AllreduceOptions,
        data: &mut [u8],
    ) -> Result<()>;

    /// Returns once every rank has called it.
    fn barrier(&mut self) -> Result<()>;

    /// Replaces `data` with rank `root`'s (same length on every rank).
    fn broadcast(&mut self, dtype: DataType, root: usize, data: &mut [u8]) -> Result<()> {
        let _ = (root, data);
        Err(unsupported("broadcast", dtype))
    }

    /// Every rank's `mine` concatenated in rank order; rank `r` contributes
    /// `bytes_per_rank[r]` bytes.
    fn allgather(
        &mut self,
        dtype: DataType,
        mine: &[u8],
        bytes_per_rank: &[usize],
    ) -> Result<Vec<u8>> {
        let _ = (mine, bytes_per_rank);
        Err(unsupported("allgather", dtype))
    }

    /// Sends `send_bytes[j]` consecutive bytes of `data` to rank `j` and
    /// returns what every rank sent this one, in rank order.
    fn alltoall(&mut self, dtype: DataType, data: &[u8], send_bytes: &[usize]) -> Result<Vec<u8>> {
        let _ = (data, send_bytes);
        Err(unsupported("alltoall", dtype))
    }

    /// Reduces `data` across ranks and returns this rank's block of
    /// `row_bytes`-sized rows (the first `rows % size` ranks get one more).
    fn reducescatter(
        &mut self,
        dtype: DataType,
        op: ReduceOp,
        data: &[u8],
        row_bytes: usize,
    ) -> Result<Vec<u8>> {
        let _ = (op, data, row_bytes);
        Err(unsupported("reducescatter", dtype))
    }

    /// This rank's NCCL communicator on CUDA device `device`, set up
    /// collectively: every rank calls it at the same point of the sequence.
    /// `Unsupported`, `NoCudaSupport` or `NcclUnavailable` come identically
    /// on every rank.
    fn nccl(&mut self, device: usize) -> Result<NcclCommunicator> {
        let _ = device;
        Err(Error::Unsupported {
            what: "GPU tensors on this transport (NCCL needs the process mesh)".into(),
        })
    }
}

pub(crate) fn unsupported(what: &str, dtype: DataType) -> Error {
    Error::Unsupported {
        what: format!("{what} of {dtype}"),
    }
}

// --------------------------------------------------------------- bit packing

/// Bits per field: enough to count `size` ranks without carrying into the
/// next field.
fn field_width(size: usize) -> usize {
    (usize::BITS - size.leading_zeros()) as usize
}

/// Spreads the bits of `words` into fields of `field_width(size)` bits,
/// `64 / width` fields per word, each holding 0 or 1.
pub(crate) fn pack_bits(words: &[u64], size: usize) -> Vec<i64> {
    let width = field_width(size);
    let per_word = 64 / width;
    let bits = words.len() * 64;
    let mut packed = vec![0u64; bits.div_ceil(per_word)];
    for i in (0..bits).filter(|i| words[i / 64] >> (i % 64) & 1 == 1) {
        packed[i / per_word] |= 1 << ((i % per_word) * width);
    }
    packed.into_iter().map(|w| w as i64).collect()
}

/// Inverse of [`pack_bits`] after a sum over `size` ranks: a bit is set
/// where its field counted every rank.
pub(crate) fn unpack_and(packed: &[i64], size: usize, words: &mut [u64]) {
    let width = field_width(size);
    let per_word = 64 / width;
    let mask = (1u64 << width) - 1;
    for (i, word) in words.iter_mut().enumerate() {
        *word = 0;
        for b in 0..64 {
            let index = i * 64 + b;
            let field = (packed[index / per_word] as u64) >> ((index % per_word) * width) & mask;
            if field == size as u64 {
                *word |= 1 << b;
            }
        }
    }
}

// -------------------------------------------------------------- communicator

/// Reducescatter by rows of `row_bytes` bytes of `T`: rank `r`'s rows (as
/// [`segment`] splits them) go into block `r` of `size` equal, zero-padded
/// blocks, so the communicator's element-wise split of the padded buffer
/// is exactly the row split; the padding is dropped from the result.
fn reducescatter_rows<T: Element>(
    comm: &mut Communicator,
    op: ReduceOp,
    data: &[u8],
    row_bytes: usize,
) -> Result<Vec<u8>> {
    let (rank, size) = (comm.rank(), comm.size());
    let element = std::mem::size_of::<T>();
    if data.is_empty() && row_bytes == 0 {
        // A zero dimension after the first: nothing to reduce on any rank.
        return Ok(Vec::new());
    }
    if row_bytes == 0 || !row_bytes.is_multiple_of(element) || !data.len().is_multiple_of(row_bytes)
    {
        return Err(Error::InvalidArgument(format!(
            "reducescatter of {} bytes in rows of {row_bytes} bytes of {}",
            data.len(),
            T::DTYPE
        )));
    }
    let (rows, row_len) = (data.len() / row_bytes, row_bytes / element);
    let block = rows.div_ceil(size) * row_len;
    let mut padded = vec![T::ZERO; block * size];
    for (r, slot) in padded.chunks_exact_mut(block.max(1)).enumerate().take(size) {
        let mine = segment(rows, size, r);
        let bytes = &data[mine.start * row_bytes..mine.end * row_bytes];
        as_bytes_mut(&mut slot[..mine.len() * row_len]).copy_from_slice(bytes);
    }
    let reduced = comm.reducescatter(&padded, op)?;
    let mine = segment(rows, size, rank).len() * row_len;
    Ok(as_bytes(&reduced[..mine]).to_vec())
}

impl Transport for Communicator {
    fn rank(&self) -> usize {
        Communicator::rank(self)
    }

    fn nccl(&mut self, device: usize) -> Result<NcclCommunicator> {
        NcclCommunicator::new(self, device)
    }

    fn size(&self) -> usize {
        Communicator::size(self)
    }

    fn bitwise_and(&mut self, words: &mut [u64]) -> Result<()> {
        let size = Communicator::size(self);
        if size == 1 {
            return Ok(());
        }
        if !self.uses_shared_memory() {
            return Communicator::bitwise_and(self, words);
        }
        let mut packed = pack_bits(words, size);
        Communicator::allreduce(self, &mut packed, ReduceOp::Sum)?;
        unpack_and(&packed, size, words);
        Ok(())
    }

    fn control_gather(&mut self, mine: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        self.gather_to_root(mine)
    }

    fn control_broadcast(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let root = Communicator::rank(self) == 0;
        let mut len = [i64::try_from(bytes.len()).unwrap_or(i64::MAX)];
        Communicator::broadcast(self, &mut len, 0)?;
        let len = usize::try_from(len[0]).map_err(|_| Error::ControlMessage {
            detail: format!("rank 0 broadcast a negative length {}", len[0]),
        })?;
        let mut data = if root { bytes } else { vec![0u8; len] };
        Communicator::broadcast(self, &mut data, 0)?;
        Ok(data)
    }

    fn allreduce(
        &mut self,
        dtype: DataType,
        options: AllreduceOptions,
        data: &mut [u8],
    ) -> Result<()> {
        self.allreduce_bytes(dtype, data, options)
    }

    fn barrier(&mut self) -> Result<()> {
        Communicator::barrier(self)
    }

    fn broadcast(&mut self, _dtype: DataType, root: usize, data: &mut [u8]) -> Result<()> {
        Communicator::broadcast(self, data, root)
    }

    fn allgather(
        &mut self,
        _dtype: DataType,
        mine: &[u8],
        bytes_per_rank: &[usize],
    ) -> Result<Vec<u8>> {
        let (gathered, lens) = Communicator::allgather(self, mine)?;
        for (rank, (got, want)) in lens.iter().zip(bytes_per_rank).enumerate() {
            if got != want {
                return Err(Error::Mismatch {
                    rank,
                    detail: format!("it gathered {got} bytes, the engine agreed on {want}"),
                });
            }
        }
        Ok(gathered)
    }

    fn alltoall(&mut self, _dtype: DataType, data: &[u8], send_bytes: &[usize]) -> Result<Vec<u8>> {
        Ok(Communicator::alltoall(self, data, send_bytes)?.0)
    }

    fn reducescatter(
        &mut self,
        dtype: DataType,
        op: ReduceOp,
        data: &[u8],
        row_bytes: usize,
    ) -> Result<Vec<u8>> {
        with_dtype!(dtype, T => reducescatter_rows::<T>(self, op, data, row_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn packed_sums_give_the_and() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for size in 1..=9 {
            let ranks: Vec<Vec<u64>> = (0..size)
                .map(|_| {
                    (0..3)
                        .map(|_| rng.gen::<u64>() | rng.gen::<u64>())
                        .collect()
                })
                .collect();
            let mut sum = vec![0i64; pack_bits(&ranks[0], size).len()];
            for words in &ranks {
                for (s, p) in sum.iter_mut().zip(pack_bits(words, size)) {
                    *s = s.wrapping_add(p);
                }
            }
            let mut got = vec![0u64; 3];
            unpack_and(&sum, size, &mut got);
            let want: Vec<u64> = (0..3)
                .map(|i| ranks.iter().fold(u64::MAX, |a, w| a & w[i]))
                .collect();
            assert_eq!(got, want, "size {size}");
        }
    }
}
