//! What a caller submits to the engine and what it gets back.
//!
//! A [`Request`] is a named tensor (element type, shape, bytes) and the
//! collective to run on it. Its [`TensorMeta`] — everything but the bytes —
//! is what ranks negotiate: a name is only executed once every rank has
//! submitted it with metadata that agrees ([`TensorMeta::disagreement`] says
//! what has to agree for each collective).
//!
//! Invariant: `data.len() == shape.iter().product() * dtype.size()` for every
//! request that reaches the negotiation; [`Request::validate`] enforces it at
//! submission, so later stages can slice buffers without checks failing.

use std::borrow::Borrow;
use std::fmt;

use super::payload::Payload;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::reduce::{as_bytes, as_bytes_mut, Element, ReduceOp};

/// The collective to run on a tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum Operation {
    /// Element-wise reduction across ranks; every rank gets the result.
    /// The input is multiplied by `prescale` before the reduction and the
    /// result by `postscale` after it (1.0 leaves it unchanged).
    Allreduce {
        /// The reduction.
        op: ReduceOp,
        /// Factor applied to the input before reducing.
        prescale: f64,
        /// Factor applied to the result after reducing.
        postscale: f64,
    },
    /// Concatenation along the first dimension, in rank order; ranks may
    /// differ in the first dimension only.
    Allgather,
    /// `root`'s tensor, on every rank.
    Broadcast {
        /// The rank whose tensor every rank receives.
        root: usize,
    },
    /// Rank `r` sends rows `splits[..j].sum()..splits[..=j].sum()` of its
    /// tensor to rank `j`; `splits` has one entry per rank and sums to the
    /// first dimension.
    Alltoall {
        /// Rows sent to each rank.
        splits: Vec<usize>,
    },
    /// Element-wise reduction; rank `r` keeps the `r`-th block of rows.
    Reducescatter {
        /// The reduction.
        op: ReduceOp,
    },
    /// Completes once every rank has submitted it; carries no data.
    Barrier,
    /// This rank has run out of data (Horovod's `join`). Until every rank
    /// has joined, the engine stands in for it in the collectives the other
    /// ranks submit: zeros for an allreduce. The request is an `i32` scalar
    /// (its value is ignored); the output is that scalar holding the rank
    /// that joined last. As in Horovod, allgather, broadcast, alltoall and
    /// reducescatter fail while a rank has joined.
    Join,
}

impl Operation {
    /// A plain allreduce with `op` and no scaling.
    pub fn allreduce(op: ReduceOp) -> Operation {
        Operation::Allreduce {
            op,
            prescale: 1.0,
            postscale: 1.0,
        }
    }

    /// Name of the collective, e.g. "allreduce".
    pub fn kind(&self) -> &'static str {
        match self {
            Operation::Allreduce { .. } => "allreduce",
            Operation::Allgather => "allgather",
            Operation::Broadcast { .. } => "broadcast",
            Operation::Alltoall { .. } => "alltoall",
            Operation::Reducescatter { .. } => "reducescatter",
            Operation::Barrier => "barrier",
            Operation::Join => "join",
        }
    }

    pub(crate) fn code(&self) -> u8 {
        match self {
            Operation::Allreduce { .. } => 1,
            Operation::Allgather => 2,
            Operation::Broadcast { .. } => 3,
            Operation::Alltoall { .. } => 4,
            Operation::Reducescatter { .. } => 5,
            Operation::Barrier => 6,
            Operation::Join => 7,
        }
    }

    /// The parts every rank must agree on, as text for error messages
    /// (alltoall splits are per rank and excluded).
    fn agreed_parameters(&self) -> String {
        match self {
            Operation::Allreduce {
                op,
                prescale,
                postscale,
            } => format!("allreduce {op} prescale {prescale} postscale {postscale}"),
            Operation::Broadcast { root } => format!("broadcast from rank {root}"),
            Operation::Reducescatter { op } => format!("reducescatter {op}"),
            other => other.kind().to_string(),
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.agreed_parameters())
    }
}

/// A named tensor and the collective to run on it.
#[derive(Clone, Debug)]
pub struct Request {
    /// Name that identifies the tensor across ranks; at most one request per
    /// name may be in flight on a rank.
    pub name: String,
    /// The collective.
    pub operation: Operation,
    /// Element type.
    pub dtype: DataType,
    /// Dimensions; the empty shape is a scalar.
    pub shape: Vec<usize>,
    /// The elements, native-endian, row-major; moved (or lent) to the
    /// engine.
    pub data: Payload,
}

impl Request {
    /// A request for `data`, elements of `T` laid out in `shape`; the
    /// elements are copied into the request's bytes.
    pub fn from_elements<T: Element>(
        name: impl Into<String>,
        operation: Operation,
        shape: Vec<usize>,
        data: &[T],
    ) -> Request {
        Request {
            name: name.into(),
            operation,
            dtype: T::DTYPE,
            shape,
            data: as_bytes(data).to_vec().into(),
        }
    }

    /// Checks what can be checked on this rank alone: the data length
    /// matches the shape (a barrier may also carry no data at all), broadcast roots and alltoall splits fit `size`
    /// ranks, scale factors are finite.
    pub(crate) fn validate(&self, size: usize) -> Result<()> {
        let invalid = |what: String| Err(Error::InvalidArgument(format!("{}: {what}", self.name)));
        if self.name.is_empty() {
            return Err(Error::InvalidArgument("tensor name is empty".into()));
        }
        let elements = self
            .shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d));
        let expected = elements.and_then(|n| n.checked_mul(self.dtype.size()));
        let barrier_without_data = self.operation == Operation::Barrier && self.data.is_empty();
        if expected != Some(self.data.byte_len()) && !barrier_without_data {
            return invalid(format!(
                "{} bytes of data for shape {:?} of {}",
                self.data.byte_len(),
                self.shape,
                self.dtype
            ));
        }
        if self.data.device_buffer().is_some() {
            match &self.operation {
                Operation::Allreduce {
                    prescale,
                    postscale,
                    ..
                } if *prescale == 1.0 && *postscale == 1.0 => {}
                Operation::Broadcast { .. } => {}
                Operation::Allreduce { .. } => {
                    return invalid(
                        "prescale and postscale are not applied to GPU tensors; scale the tensor first".into(),
                    )
                }
                other => {
                    return invalid(format!(
                        "{} of a GPU tensor: only allreduce and broadcast run on NCCL; copy it to the host",
                        other.kind()
                    ))
                }
            }
        }
        match &self.operation {
            Operation::Allreduce {
                prescale,
                postscale,
                ..
            } if !prescale.is_finite() || !postscale.is_finite() => {
                return invalid("scale factors must be finite".into());
            }
            Operation::Broadcast { root } if *root >= size => {
                return invalid(format!("broadcast root {root} is not a rank of {size}"));
            }
            Operation::Join if self.dtype != DataType::I32 || !self.shape.is_empty() => {
                return invalid(format!(
                    "join takes an int32 scalar, not {} of shape {:?}",
                    self.dtype, self.shape
                ));
            }
            Operation::Allgather | Operation::Alltoall { .. } if self.shape.is_empty() => {
                return invalid(format!("{} needs at least one dimension", self.operation));
            }
            Operation::Alltoall { splits }
                if splits.len() != size || splits.iter().sum::<usize>() != self.shape[0] =>
            {
                return invalid(format!(
                    "alltoall splits {splits:?} must have {size} entries summing to {}",
                    self.shape[0]
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// Everything but the data.
    pub(crate) fn meta(&self) -> TensorMeta {
        TensorMeta {
            name: self.name.clone(),
            operation: self.operation.clone(),
            dtype: self.dtype,
            shape: self.shape.clone(),
            on_device: self.data.device_buffer().is_some(),
        }
    }
}

/// What ranks negotiate about a tensor: a [`Request`] without its data.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TensorMeta {
    pub name: String,
    pub operation: Operation,
    pub dtype: DataType,
    pub shape: Vec<usize>,
    /// In GPU memory (reduced with NCCL): every rank must agree, or some
    /// would wait in NCCL for ranks that never call it.
    pub on_device: bool,
}

impl TensorMeta {
    /// Bytes of the tensor.
    pub fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }

    /// Where the ranks' metadata for one name disagree, naming the ranks:
    /// `None` when they agree. `metas[r]` is rank `r`'s.
    pub fn disagreement<M: Borrow<TensorMeta>>(metas: &[M]) -> Option<String> {
        // Agreement, the common case, is checked on the values themselves;
        // only a disagreement renders them (a round at 4,096 ranks rendered
        // 2.6 million strings).
        let first = metas.first()?.borrow();
        if metas.iter().all(|m| m.borrow().agrees_with(first)) {
            return None;
        }
        let metas: Vec<&TensorMeta> = metas.iter().map(Borrow::borrow).collect();
        // Each property that has to agree, rendered per rank; the first one
        // that differs is reported.
        type Render = fn(&TensorMeta) -> String;
        let properties: [(&str, Render); 4] = [
            ("operation", |m| m.operation.agreed_parameters()),
            ("element type", |m| m.dtype.to_string()),
            ("memory", |m| {
                if m.on_device { "GPU" } else { "host" }.to_string()
            }),
            ("shape", |m| match m.operation {
                // Ranks may differ in the first dimension.
                Operation::Allgather | Operation::Alltoall { .. } => {
                    format!("[*, {}]", join(m.shape.iter().skip(1)))
                }
                Operation::Barrier | Operation::Join => String::new(),
                _ => format!("{:?}", m.shape),
            }),
        ];
        for (property, render) in properties {
            let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
            for (rank, &meta) in metas.iter().enumerate() {
                let value = render(meta);
                match groups.iter_mut().find(|(v, _)| *v == value) {
                    Some((_, ranks)) => ranks.push(rank),
                    None => groups.push((value, vec![rank])),
                }
            }
            if groups.len() > 1 {
                let parts: Vec<String> = groups
                    .iter()
                    .map(|(value, ranks)| format!("{value} on ranks {ranks:?}"))
                    .collect();
                return Some(format!("{property} differs: {}", parts.join("; ")));
            }
        }
        None
    }

    /// Whether `self` and `other` agree on every property `disagreement`
    /// checks (the same rules, without rendering). An alltoall's parameters
    /// count whole here, so ranks that differ only in what `disagreement`
    /// ignores there take its slower path to `None`.
    fn agrees_with(&self, other: &TensorMeta) -> bool {
        let shapes_agree = match self.operation {
            // Ranks may differ in the first dimension.
            Operation::Allgather | Operation::Alltoall { .. } => {
                self.shape.get(1..) == other.shape.get(1..)
            }
            Operation::Barrier | Operation::Join => true,
            _ => self.shape == other.shape,
        };
        shapes_agree
            && self.operation == other.operation
            && self.dtype == other.dtype
            && self.on_device == other.on_device
    }
}

fn join<'a>(dims: impl Iterator<Item = &'a usize>) -> String {
    dims.map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// The result of a completed request.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    /// The result's elements, native-endian, row-major (the request's lent
    /// memory, when it lent some to an in-place collective).
    pub data: Payload,
    /// The result's dimensions (differs from the input's for allgather,
    /// alltoall and reducescatter).
    pub shape: Vec<usize>,
}

impl Output {
    /// The result's elements as `T`: `None` unless `data` is a whole number
    /// of them.
    pub fn to_elements<T: Element>(&self) -> Option<Vec<T>> {
        let size = std::mem::size_of::<T>();
        if !self.data.len().is_multiple_of(size) {
            return None;
        }
        let mut elements = vec![T::ZERO; self.data.len() / size];
        as_bytes_mut(&mut elements).copy_from_slice(&self.data);
        Some(elements)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(operation: Operation, dtype: DataType, shape: &[usize]) -> TensorMeta {
        TensorMeta {
            name: "t".into(),
            operation,
            dtype,
            shape: shape.to_vec(),
            on_device: false,
        }
    }

    #[test]
    fn disagreement_names_the_ranks_of_each_variant() {
        let sum = Operation::allreduce(ReduceOp::Sum);
        let metas = [
            meta(sum.clone(), DataType::F32, &[4, 2]),
            meta(sum.clone(), DataType::F32, &[4, 2]),
            meta(sum.clone(), DataType::F32, &[4, 3]),
        ];
        assert_eq!(
            TensorMeta::disagreement(&metas).unwrap(),
            "shape differs: [4, 2] on ranks [0, 1]; [4, 3] on ranks [2]"
        );
        let metas = [
            meta(sum.clone(), DataType::F32, &[4]),
            meta(sum, DataType::F64, &[4]),
        ];
        assert_eq!(
            TensorMeta::disagreement(&metas).unwrap(),
            "element type differs: f32 on ranks [0]; f64 on ranks [1]"
        );
        let metas = [
            meta(Operation::Allgather, DataType::I8, &[1, 5]),
            meta(Operation::Allgather, DataType::I8, &[7, 5]),
        ];
        assert_eq!(TensorMeta::disagreement(&metas), None);
        let metas = [
            meta(Operation::Broadcast { root: 0 }, DataType::I8, &[1]),
            meta(Operation::Broadcast { root: 1 }, DataType::I8, &[1]),
        ];
        assert!(TensorMeta::disagreement(&metas)
            .unwrap()
            .starts_with("operation differs: broadcast from rank 0 on ranks [0]"));
    }

    #[test]
    fn elements_round_trip_through_requests_and_outputs() {
        let request = Request::from_elements("x", Operation::Allgather, vec![3], &[1i32, -2, 3]);
        assert_eq!((request.dtype, request.data.len()), (DataType::I32, 12));
        let output = Output {
            data: request.data,
            shape: vec![3],
        };
        assert_eq!(output.to_elements::<i32>(), Some(vec![1, -2, 3]));
        assert_eq!(output.to_elements::<i64>(), None);
    }

    #[test]
    fn validation_checks_length_roots_splits_and_scales() {
        let request = |operation, dtype: DataType, shape: &[usize], len| Request {
            name: "x".into(),
            operation,
            dtype,
            shape: shape.to_vec(),
            data: vec![0; len].into(),
        };
        let sum = Operation::allreduce(ReduceOp::Sum);
        assert!(request(sum.clone(), DataType::F32, &[2, 3], 24)
            .validate(2)
            .is_ok());
        assert!(request(sum.clone(), DataType::F32, &[], 4)
            .validate(2)
            .is_ok());
        assert!(request(Operation::Barrier, DataType::U8, &[], 0)
            .validate(2)
            .is_ok());
        let err = request(sum, DataType::F32, &[2, 3], 20)
            .validate(2)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid argument: x: 20 bytes of data for shape [2, 3] of f32"
        );
        assert!(
            request(Operation::Broadcast { root: 2 }, DataType::U8, &[1], 1)
                .validate(2)
                .is_err()
        );
        let splits = Operation::Alltoall { splits: vec![1, 2] };
        assert!(request(splits.clone(), DataType::U8, &[3], 3)
            .validate(2)
            .is_ok());
        assert!(request(splits, DataType::U8, &[4], 4).validate(2).is_err());
        let scaled = Operation::Allreduce {
            op: ReduceOp::Sum,
            prescale: 0.5,
            postscale: 1.0,
        };
        assert!(request(scaled.clone(), DataType::I32, &[1], 4)
            .validate(1)
            .is_ok());
        assert!(request(scaled, DataType::F64, &[1], 8).validate(1).is_ok());
        let infinite = Operation::Allreduce {
            op: ReduceOp::Sum,
            prescale: f64::INFINITY,
            postscale: 1.0,
        };
        assert!(request(infinite, DataType::F64, &[1], 8)
            .validate(1)
            .is_err());
    }
}
