//! Tensor fusion: many small allreduces become one.
//!
//! A collective has a fixed latency, so reducing a hundred small gradients
//! one by one costs a hundred latencies. [`plan`] groups the ready allreduce
//! responses that share element type, reduction and scale factors into
//! [`Batch`]es of at most `threshold` bytes; the engine copies a batch's
//! tensors into one [`FusionBuffer`], reduces it once and copies the results
//! back (Horovod's tensor fusion and `fusion_buffer_manager`).
//!
//! Unlike Horovod, a tensor of [`RUNS_ALONE_FROM`] bytes or more is not
//! fused: it is reduced in its own memory, saving two copies of it, and at
//! that size a collective's latency is small beside the copies.
//!
//! Invariant: [`plan`] is a pure function of the ordered responses and the
//! threshold, and every rank runs it on the same responses with the same
//! threshold (rank 0's), so every rank executes the same batches in the same
//! order with the same byte layout.

use super::message::ReadyResponse;
use super::request::Operation;
use crate::dtype::DataType;
use crate::reduce::ReduceOp;

/// Allreduces at least this big run alone, in place. At 1 MiB, copying in
/// and out of the fusion buffer takes ~80 µs (memcpy at ~27 GB/s), while a
/// collective's fixed cost is under 1 µs on shared memory and 7-42 µs over
/// TCP for 2-4 ranks (docs/bench/collectives.md, 4-byte rows).
pub(crate) const RUNS_ALONE_FROM: usize = 1 << 20;

/// Tensors executed as one collective, in buffer order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Batch {
    pub responses: Vec<ReadyResponse>,
}

impl Batch {
    /// Total bytes of the batch's tensors.
    pub fn bytes(&self) -> usize {
        self.responses.iter().map(|r| r.meta.bytes()).sum()
    }
}

/// What fused tensors must share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FusionKey {
    dtype: DataType,
    op: ReduceOp,
    prescale: u64,
    postscale: u64,
}

fn fusion_key(response: &ReadyResponse) -> Option<FusionKey> {
    if response.meta.bytes() >= RUNS_ALONE_FROM || response.meta.on_device {
        return None;
    }
    match response.meta.operation {
        Operation::Allreduce {
            op,
            prescale,
            postscale,
        } => Some(FusionKey {
            dtype: response.meta.dtype,
            op,
            prescale: prescale.to_bits(),
            postscale: postscale.to_bits(),
        }),
        _ => None,
    }
}

/// Groups `responses` into batches. Each batch starts with the first
/// response not yet placed; an allreduce batch then takes every later
/// response with the same fusion key that still fits under `threshold`
/// bytes. A tensor larger than the threshold, or of [`RUNS_ALONE_FROM`]
/// bytes or more, runs alone.
pub(crate) fn plan(responses: Vec<ReadyResponse>, threshold: usize) -> Vec<Batch> {
    let mut left: Vec<Option<ReadyResponse>> = responses.into_iter().map(Some).collect();
    let mut batches = Vec::new();
    for first in 0..left.len() {
        let Some(head) = left[first].take() else {
            continue;
        };
        let key = fusion_key(&head);
        let mut bytes = head.meta.bytes();
        let mut batch = vec![head];
        if let Some(key) = key {
            for slot in left.iter_mut().skip(first + 1) {
                let fits = slot.as_ref().is_some_and(|candidate| {
                    fusion_key(candidate) == Some(key)
                        && bytes + candidate.meta.bytes() <= threshold
                });
                if fits {
                    if let Some(candidate) = slot.take() {
                        bytes += candidate.meta.bytes();
                        batch.push(candidate);
                    }
                }
            }
        }
        batches.push(Batch { responses: batch });
    }
    batches
}

/// A reusable buffer, 8-byte aligned, so a fused batch of any element type
/// can be viewed as a slice of its elements in place.
#[derive(Debug, Default)]
pub(crate) struct FusionBuffer {
    words: Vec<u64>,
}

impl FusionBuffer {
    /// The first `len` bytes of the buffer, grown if needed; contents are
    /// unspecified.
    pub fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        let words = len.div_ceil(8);
        if self.words.len() < words {
            self.words.resize(words, 0);
        }
        // SAFETY: the pointer comes from a live `&mut [u64]` of at least
        // `len` bytes; `u8` has alignment 1 and every byte of a `u64` is
        // initialised, so the view is valid and unaliased for the borrow.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::request::TensorMeta;

    fn ready(name: &str, operation: Operation, dtype: DataType, len: usize) -> ReadyResponse {
        ReadyResponse {
            meta: TensorMeta {
                name: name.into(),
                operation,
                dtype,
                shape: vec![len],
                on_device: false,
            },
            first_dims: Vec::new(),
        }
    }

    fn names(batches: &[Batch]) -> Vec<Vec<&str>> {
        batches
            .iter()
            .map(|b| b.responses.iter().map(|r| r.meta.name.as_str()).collect())
            .collect()
    }

    #[test]
    fn compatible_tensors_fuse_up_to_the_threshold() {
        let sum = Operation::allreduce(ReduceOp::Sum);
        let max = Operation::allreduce(ReduceOp::Max);
        let responses = vec![
            ready("a", sum.clone(), DataType::F32, 10),
            ready("b", max.clone(), DataType::F32, 10),
            ready("c", sum.clone(), DataType::F64, 10),
            ready("d", sum.clone(), DataType::F32, 10),
            ready("e", Operation::Allgather, DataType::F32, 1),
            ready("f", sum.clone(), DataType::F32, 20),
            ready("g", max, DataType::F32, 10),
            ready("h", sum, DataType::F32, 5),
        ];
        // a(40) + d(40) + f(80) = 160 > 130, so f waits; h(20) still fits.
        let batches = plan(responses, 130);
        assert_eq!(
            names(&batches),
            vec![
                vec!["a", "d", "h"],
                vec!["b", "g"],
                vec!["c"],
                vec!["e"],
                vec!["f"]
            ]
        );
    }

    #[test]
    fn scale_factors_split_batches_and_big_tensors_run_alone() {
        let plain = Operation::allreduce(ReduceOp::Average);
        let scaled = Operation::Allreduce {
            op: ReduceOp::Average,
            prescale: 0.5,
            postscale: 1.0,
        };
        let responses = vec![
            ready("big", plain.clone(), DataType::F32, 1000),
            ready("x", plain.clone(), DataType::F32, 1),
            ready("y", scaled, DataType::F32, 1),
            ready("z", plain, DataType::F32, 1),
        ];
        let batches = plan(responses, 64);
        assert_eq!(
            names(&batches),
            vec![vec!["big"], vec!["x", "z"], vec!["y"]]
        );
        assert_eq!(batches[1].bytes(), 8);
    }

    #[test]
    fn tensors_of_a_mebibyte_run_alone_under_any_threshold() {
        let sum = Operation::allreduce(ReduceOp::Sum);
        let floats = RUNS_ALONE_FROM / 4;
        let responses = vec![
            ready("small", sum.clone(), DataType::F32, 10),
            ready("mib", sum.clone(), DataType::F32, floats),
            ready("under", sum.clone(), DataType::F32, floats - 1),
            ready("small2", sum, DataType::F32, 10),
        ];
        let batches = plan(responses, usize::MAX);
        assert_eq!(
            names(&batches),
            vec![vec!["small", "under", "small2"], vec!["mib"]]
        );
    }

    #[test]
    fn fusion_buffer_is_aligned_and_grows() {
        let mut buffer = FusionBuffer::default();
        assert_eq!(buffer.bytes_mut(3).len(), 3);
        let bytes = buffer.bytes_mut(1001);
        assert_eq!(bytes.len(), 1001);
        assert_eq!(bytes.as_ptr() as usize % 8, 0);
    }
}
