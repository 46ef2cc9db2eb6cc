//! Allreduce with Horovod's options, over several tensors at once, and over
//! untyped bytes: the layer between callers and the typed ring allreduce.
//!
//! * Scale factors (Horovod's `prescale_factor` / `postscale_factor`)
//!   multiply the input before and the result after the reduction. As in
//!   Horovod, integers are scaled in `f64` and truncated back; factors must
//!   be finite.
//! * [`Compression::Fp16`] (Horovod's `Compression.fp16`) carries `f32`,
//!   `f64` and `bf16` data as `f16` on the wire and reduces it there: half the
//!   bytes of `f32`, at `f16`'s precision and range. Other types are sent
//!   as they are, as Horovod leaves non-float tensors uncompressed.
//! * A grouped allreduce fuses its tensors into one buffer and reduces that
//!   once, after the ranks agreed on the number of tensors and their total
//!   length.
//! * [`Communicator::allreduce_bytes`] names the element type at run time
//!   with a [`DataType`] and runs the typed code for it, in place when the
//!   bytes are aligned for the type and through a copy when not.
//!
//! Every path ends in [`Communicator::allreduce`], so the ring and whatever
//! transport it uses stay in one place.

use half::f16;

use crate::communicator::Communicator;
use crate::dtype::DataType;
use crate::error::Result;
use crate::reduce::{as_bytes, as_bytes_mut, as_elements_mut, Element, ReduceOp};
use crate::wire::{Header, Kind};
use crate::with_dtype;

/// How data travels during an allreduce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    /// As it is.
    #[default]
    None,
    /// Floating-point data as `f16` (Horovod's `Compression.fp16`).
    Fp16,
}

/// What an allreduce computes: the operation, scale factors and compression.
/// `From<ReduceOp>` gives the plain reduction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AllreduceOptions {
    /// The element-wise reduction.
    pub op: ReduceOp,
    /// Factor every input element is multiplied by before the reduction.
    pub prescale: f64,
    /// Factor every result element is multiplied by after the reduction.
    pub postscale: f64,
    /// How the data travels.
    pub compression: Compression,
}

impl AllreduceOptions {
    /// `op` without scaling or compression.
    pub fn new(op: ReduceOp) -> AllreduceOptions {
        AllreduceOptions {
            op,
            prescale: 1.0,
            postscale: 1.0,
            compression: Compression::None,
        }
    }

    /// These options with the inputs multiplied by `factor` first.
    pub fn with_prescale(self, factor: f64) -> AllreduceOptions {
        AllreduceOptions {
            prescale: factor,
            ..self
        }
    }

    /// These options with the results multiplied by `factor`.
    pub fn with_postscale(self, factor: f64) -> AllreduceOptions {
        AllreduceOptions {
            postscale: factor,
            ..self
        }
    }

    /// These options with `compression` on the wire.
    pub fn with_compression(self, compression: Compression) -> AllreduceOptions {
        AllreduceOptions {
            compression,
            ..self
        }
    }

    /// Why these options cannot apply to `dtype`, if they cannot.
    fn refusal(&self, dtype: DataType) -> Option<String> {
        let finite = self.prescale.is_finite() && self.postscale.is_finite();
        (!finite).then(|| {
            format!(
                "prescale and postscale factors must be finite, got {} and {} for {dtype}",
                self.prescale, self.postscale
            )
        })
    }
}

impl From<ReduceOp> for AllreduceOptions {
    fn from(op: ReduceOp) -> AllreduceOptions {
        AllreduceOptions::new(op)
    }
}

impl Communicator {
    /// [`Communicator::allreduce`] with scale factors and compression. After
    /// an error the contents of `data` are unspecified.
    ///
    /// # Errors
    /// `InvalidArgument` for scale factors that are not finite;
    /// otherwise as [`Communicator::allreduce`].
    pub fn allreduce_with<T: Element>(
        &mut self,
        data: &mut [T],
        options: impl Into<AllreduceOptions>,
    ) -> Result<()> {
        let options = options.into();
        if let Some(message) = options.refusal(T::DTYPE) {
            return self.refuse(message);
        }
        if options.prescale != 1.0 {
            T::scale(data, options.prescale);
        }
        let compress = options.compression == Compression::Fp16
            && matches!(T::DTYPE, DataType::F32 | DataType::F64 | DataType::Bf16);
        if compress {
            let mut wire: Vec<f16> = data.iter().map(|x| f16::from_f64(x.to_f64())).collect();
            self.allreduce(&mut wire, options.op)?;
            for (x, w) in data.iter_mut().zip(&wire) {
                *x = T::from_f64(w.to_f64());
            }
        } else {
            self.allreduce(data, options.op)?;
        }
        if options.postscale != 1.0 {
            T::scale(data, options.postscale);
        }
        Ok(())
    }

    /// Allreduces several tensors in one fused reduction: each tensor ends
    /// as if allreduced alone. All ranks must pass the same number of
    /// tensors with the same lengths, element type and options.
    ///
    /// # Errors
    /// `Mismatch` when another rank called another collective, number of
    /// tensors, total length, element type or operation; otherwise as
    /// [`Communicator::allreduce_with`].
    pub fn grouped_allreduce<T: Element>(
        &mut self,
        tensors: &mut [&mut [T]],
        options: impl Into<AllreduceOptions>,
    ) -> Result<()> {
        let options = options.into();
        let Ok(count) = u32::try_from(tensors.len()) else {
            return self.refuse(format!("{} tensors are too many to group", tensors.len()));
        };
        let total: usize = tensors.iter().map(|t| t.len()).sum();
        let kind = Kind::GroupedAllreduce;
        self.collective(|comm, seq| {
            let header = Header::new(seq, kind, T::CODE, Some(options.op), total, count);
            comm.agree(&header, kind)
        })?;
        let mut fused = Vec::with_capacity(total);
        for tensor in tensors.iter() {
            fused.extend_from_slice(tensor);
        }
        self.allreduce_with(&mut fused, options)?;
        let mut rest = fused.as_slice();
        for tensor in tensors.iter_mut() {
            let (head, tail) = rest.split_at(tensor.len());
            tensor.copy_from_slice(head);
            rest = tail;
        }
        Ok(())
    }

    /// [`Communicator::allreduce_with`] on the native-endian bytes of
    /// elements of type `dtype`.
    ///
    /// # Errors
    /// `InvalidArgument` when the length of `data` is not a whole number of
    /// elements; otherwise as [`Communicator::allreduce_with`].
    pub fn allreduce_bytes(
        &mut self,
        dtype: DataType,
        data: &mut [u8],
        options: impl Into<AllreduceOptions>,
    ) -> Result<()> {
        if !data.len().is_multiple_of(dtype.size()) {
            return self.refuse(format!(
                "{} bytes are not a whole number of {dtype} elements",
                data.len()
            ));
        }
        let options = options.into();
        with_dtype!(dtype, T => self.allreduce_bytes_as::<T>(data, options))
    }

    fn allreduce_bytes_as<T: Element>(
        &mut self,
        data: &mut [u8],
        options: AllreduceOptions,
    ) -> Result<()> {
        if let Some(typed) = as_elements_mut::<T>(data) {
            return self.allreduce_with(typed, options);
        }
        let mut typed = vec![T::ZERO; data.len() / std::mem::size_of::<T>()];
        as_bytes_mut(&mut typed).copy_from_slice(data);
        self.allreduce_with(&mut typed, options)?;
        data.copy_from_slice(as_bytes(&typed));
        Ok(())
    }
}
