//! Reduction operations and the element types they apply to.
//!
//! [`Element`] is sealed: it is implemented only for primitive integers and
//! floats, which have no padding and for which every bit pattern is a valid
//! value. That invariant is what lets the communicator send a `&[T]` as its
//! raw native-endian bytes and receive bytes straight into a `&mut [T]`
//! ([`as_bytes`], [`as_bytes_mut`]) without a per-element copy.
//! [`half::f16`] and [`half::bf16`] qualify: each is a `repr(transparent)`
//! `u16`.
//!
//! The reduce loops are plain element-wise loops over equal-length slices with
//! the operation chosen outside the loop, so the compiler can vectorise them.
//! Half-precision types are widened to `f32` per element inside the loop and
//! each result rounded back, as Horovod does on CPUs.

use std::fmt;

use half::{bf16, f16};

use crate::dtype::DataType;

/// The reduction an allreduce applies element-wise across ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum of all ranks' values (wrapping for integers).
    Sum,
    /// Sum divided by the number of ranks (truncating for integers).
    Average,
    /// Smallest value.
    Min,
    /// Largest value.
    Max,
    /// Product of all ranks' values (wrapping for integers).
    Product,
}

impl ReduceOp {
    const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Average,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Product,
    ];

    /// Parses "SUM", "AVERAGE", "MIN", "MAX" or "PRODUCT", ignoring case.
    pub fn from_name(name: &str) -> Option<ReduceOp> {
        ReduceOp::ALL
            .into_iter()
            .find(|op| op.name().eq_ignore_ascii_case(name))
    }

    /// The upper-case name, as accepted by [`ReduceOp::from_name`].
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "SUM",
            ReduceOp::Average => "AVERAGE",
            ReduceOp::Min => "MIN",
            ReduceOp::Max => "MAX",
            ReduceOp::Product => "PRODUCT",
        }
    }

    /// Code of this operation in collective headers on the wire.
    pub(crate) fn code(self) -> u8 {
        match self {
            ReduceOp::Sum => 1,
            ReduceOp::Average => 2,
            ReduceOp::Min => 3,
            ReduceOp::Max => 4,
            ReduceOp::Product => 5,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|op| op.code() == code)
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A type collectives can carry and reduce: `u8`, `i8`, `i32`, `i64`,
/// [`f16`](half::f16), [`bf16`](half::bf16), `f32` and `f64`.
///
/// Sealed: implemented only for primitives (and the `half` crate's
/// `repr(transparent)` wrappers of `u16`) without padding whose every bit
/// pattern is valid, which the byte-level transport relies on.
pub trait Element: Copy + Send + Sync + PartialEq + fmt::Debug + 'static + sealed::Sealed {
    /// The run-time name of this type.
    const DTYPE: DataType;
    /// Name used in error messages, e.g. "f32".
    const NAME: &'static str = Self::DTYPE.name();
    /// Zero of the type.
    const ZERO: Self;
    /// Code of the type in collective headers on the wire.
    #[doc(hidden)]
    const CODE: u8 = Self::DTYPE.code();

    /// `dst[i] = op(dst[i], src[i])` for every `i`; `Average` sums (the
    /// division happens once, in [`Element::divide`]). The slices have equal
    /// length. Half-precision types compute in `f32` and round each result.
    fn reduce(dst: &mut [Self], src: &[Self], op: ReduceOp);

    /// `dst[i] = op(a[i], b[i])` for every `i`: [`Element::reduce`] into a
    /// third slice, which saves copying `a` into `dst` first.
    #[doc(hidden)]
    fn reduce_from(dst: &mut [Self], a: &[Self], b: &[Self], op: ReduceOp);

    /// Divides every element by `n` (the last step of `Average`).
    fn divide(data: &mut [Self], n: usize);

    /// Multiplies every element by `factor`; integers compute in `f64` and
    /// truncate toward zero.
    #[doc(hidden)]
    fn scale(data: &mut [Self], factor: f64);

    /// The value as an `f64` (exact for every type but `i64`).
    #[doc(hidden)]
    fn to_f64(self) -> f64;

    /// The nearest value to `value` (saturating for integers).
    #[doc(hidden)]
    fn from_f64(value: f64) -> Self;
}

#[inline]
fn combine<T: Copy>(dst: &mut [T], src: &[T], f: impl Fn(T, T) -> T) {
    debug_assert_eq!(dst.len(), src.len());
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f(*d, *s);
    }
}

#[inline]
fn combine_from<T: Copy>(dst: &mut [T], a: &[T], b: &[T], f: impl Fn(T, T) -> T) {
    debug_assert!(dst.len() == a.len() && a.len() == b.len());
    for ((d, x), y) in dst.iter_mut().zip(a).zip(b) {
        *d = f(*x, *y);
    }
}

/// Implements `Element` for a float type `$t` that computes in `$wide`
/// (itself for `f32` and `f64`, `f32` for the half-precision types), with
/// `$widen` and `$narrow` converting between the two.
macro_rules! float_element {
    ($t:ty, $dtype:ident, $zero:expr, $wide:ty, $widen:expr, $narrow:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DataType = DataType::$dtype;
            const ZERO: Self = $zero;

            fn reduce(dst: &mut [Self], src: &[Self], op: ReduceOp) {
                let (widen, narrow) = ($widen, $narrow);
                let via = |f: fn($wide, $wide) -> $wide| {
                    move |a: $t, b: $t| -> $t { narrow(f(widen(a), widen(b))) }
                };
                match op {
                    ReduceOp::Sum | ReduceOp::Average => combine(dst, src, via(|a, b| a + b)),
                    ReduceOp::Product => combine(dst, src, via(|a, b| a * b)),
                    ReduceOp::Min => combine(dst, src, via(<$wide>::min)),
                    ReduceOp::Max => combine(dst, src, via(<$wide>::max)),
                }
            }

            fn reduce_from(dst: &mut [Self], a: &[Self], b: &[Self], op: ReduceOp) {
                let (widen, narrow) = ($widen, $narrow);
                let via = |f: fn($wide, $wide) -> $wide| {
                    move |a: $t, b: $t| -> $t { narrow(f(widen(a), widen(b))) }
                };
                match op {
                    ReduceOp::Sum | ReduceOp::Average => combine_from(dst, a, b, via(|a, b| a + b)),
                    ReduceOp::Product => combine_from(dst, a, b, via(|a, b| a * b)),
                    ReduceOp::Min => combine_from(dst, a, b, via(<$wide>::min)),
                    ReduceOp::Max => combine_from(dst, a, b, via(<$wide>::max)),
                }
            }

            fn divide(data: &mut [Self], n: usize) {
                let (widen, narrow) = ($widen, $narrow);
                let n = n as $wide;
                for x in data {
                    *x = narrow(widen(*x) / n);
                }
            }

            fn scale(data: &mut [Self], factor: f64) {
                let (widen, narrow) = ($widen, $narrow);
                let factor = factor as $wide;
                for x in data {
                    *x = narrow(widen(*x) * factor);
                }
            }

            fn to_f64(self) -> f64 {
                let widen = $widen;
                f64::from(widen(self))
            }

            fn from_f64(value: f64) -> Self {
                let narrow = $narrow;
                narrow(value as $wide)
            }
        }
    };
}

macro_rules! int_element {
    ($t:ty, $dtype:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DataType = DataType::$dtype;
            const ZERO: Self = 0;

            fn reduce(dst: &mut [Self], src: &[Self], op: ReduceOp) {
                match op {
                    ReduceOp::Sum | ReduceOp::Average => combine(dst, src, <$t>::wrapping_add),
                    ReduceOp::Product => combine(dst, src, <$t>::wrapping_mul),
                    ReduceOp::Min => combine(dst, src, Ord::min),
                    ReduceOp::Max => combine(dst, src, Ord::max),
                }
            }

            fn reduce_from(dst: &mut [Self], a: &[Self], b: &[Self], op: ReduceOp) {
                match op {
                    ReduceOp::Sum | ReduceOp::Average => {
                        combine_from(dst, a, b, <$t>::wrapping_add)
                    }
                    ReduceOp::Product => combine_from(dst, a, b, <$t>::wrapping_mul),
                    ReduceOp::Min => combine_from(dst, a, b, Ord::min),
                    ReduceOp::Max => combine_from(dst, a, b, Ord::max),
                }
            }

            fn divide(data: &mut [Self], n: usize) {
                // The job size fits every element type we reduce in practice;
                // saturate rather than wrap if it does not.
                let n = <$t>::try_from(n).unwrap_or(<$t>::MAX);
                for x in data {
                    *x /= n;
                }
            }

            fn scale(data: &mut [Self], factor: f64) {
                // In f64, truncated back (saturating), as Horovod scales integers.
                for x in data {
                    *x = (*x as f64 * factor) as $t;
                }
            }

            fn to_f64(self) -> f64 {
                self as f64
            }

            fn from_f64(value: f64) -> Self {
                value as $t
            }
        }
    };
}

float_element!(f32, F32, 0.0, f32, |x: f32| x, |x: f32| x);
float_element!(f64, F64, 0.0, f64, |x: f64| x, |x: f64| x);
float_element!(f16, F16, f16::ZERO, f32, f16::to_f32, f16::from_f32);
float_element!(bf16, Bf16, bf16::ZERO, f32, bf16::to_f32, bf16::from_f32);
int_element!(u8, U8);
int_element!(i8, I8);
int_element!(i16, I16);
int_element!(i32, I32);
int_element!(i64, I64);

/// Name of the element type with wire code `code`, for error messages.
pub(crate) fn type_name(code: u8) -> Option<&'static str> {
    DataType::from_code(code).map(DataType::name)
}

/// The native-endian bytes of `data`.
pub(crate) fn as_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: `Element` is sealed and implemented only for primitive integers
    // and floats and for `repr(transparent)` wrappers of `u16`: they have no
    // padding, so every byte of the slice is
    // initialised, and `u8` has alignment 1. The length is the slice's size in
    // bytes and the borrow keeps `data` alive and unaliased by writers.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// The native-endian bytes of `data`, writable.
pub(crate) fn as_bytes_mut<T: Element>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; in addition every bit pattern is a valid value
    // of the types implementing `Element`, so any bytes written
    // through the returned slice leave valid values behind.
    unsafe {
        std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(data))
    }
}

/// `bytes` viewed as elements of `T`, or `None` when its address is not
/// aligned for `T` or its length is not a whole number of elements.
pub(crate) fn as_elements_mut<T: Element>(bytes: &mut [u8]) -> Option<&mut [T]> {
    // SAFETY: every bit pattern is a valid `T` (see `as_bytes_mut`), so any
    // initialised bytes may be read and written as `T`; `align_to_mut` splits
    // off the unaligned head and the incomplete tail, and the middle is only
    // used when both are empty.
    let (head, middle, tail) = unsafe { bytes.align_to_mut::<T>() };
    (head.is_empty() && tail.is_empty()).then_some(middle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_parse_case_insensitively() {
        for op in ReduceOp::ALL {
            assert_eq!(ReduceOp::from_name(op.name()), Some(op));
            assert_eq!(ReduceOp::from_name(&op.name().to_lowercase()), Some(op));
            assert_eq!(ReduceOp::from_code(op.code()), Some(op));
        }
        assert_eq!(ReduceOp::from_name("Average"), Some(ReduceOp::Average));
        assert_eq!(ReduceOp::from_name("mean"), None);
        assert_eq!(ReduceOp::from_name(""), None);
    }

    #[test]
    fn float_reductions() {
        let src = [1.0f32, -2.0, 3.5];
        let cases = [
            (ReduceOp::Sum, [3.0f32, 2.0, 4.0]),
            (ReduceOp::Average, [3.0, 2.0, 4.0]),
            (ReduceOp::Product, [2.0, -8.0, 1.75]),
            (ReduceOp::Min, [1.0, -2.0, 0.5]),
            (ReduceOp::Max, [2.0, 4.0, 3.5]),
        ];
        for (op, expected) in cases {
            let mut dst = [2.0f32, 4.0, 0.5];
            f32::reduce(&mut dst, &src, op);
            assert_eq!(dst, expected, "{op}");
        }
        let mut avg = [3.0f64, -6.0];
        f64::divide(&mut avg, 3);
        assert_eq!(avg, [1.0, -2.0]);
    }

    #[test]
    fn reduce_from_equals_copy_then_reduce() {
        let (a, b) = ([1.5f32, -0.0, 7.0], [2.0f32, 0.0, -7.5]);
        for op in ReduceOp::ALL {
            let mut expected = a;
            f32::reduce(&mut expected, &b, op);
            let mut got = [0.0f32; 3];
            f32::reduce_from(&mut got, &a, &b, op);
            assert_eq!(got.map(f32::to_bits), expected.map(f32::to_bits), "{op}");
        }
        let mut got = [0u8; 2];
        u8::reduce_from(&mut got, &[250, 3], &[10, 4], ReduceOp::Sum);
        assert_eq!(got, [4, 7]);
    }

    #[test]
    fn integer_reductions_wrap_and_truncate() {
        let mut dst = [i32::MAX, 7, -7];
        i32::reduce(&mut dst, &[1, 2, 3], ReduceOp::Sum);
        assert_eq!(dst, [i32::MIN, 9, -4]);
        i32::divide(&mut dst[1..], 2);
        assert_eq!(dst[1..], [4, -2]);
        let mut dst = [5i64, -5];
        i64::reduce(&mut dst, &[3, 3], ReduceOp::Min);
        assert_eq!(dst, [3, -5]);
    }

    #[test]
    fn byte_views_round_trip() {
        let values = [1.5f64, -0.25];
        let bytes = as_bytes(&values).to_vec();
        assert_eq!(bytes.len(), 16);
        assert_eq!(bytes[..8], 1.5f64.to_ne_bytes());
        let mut back = [0.0f64; 2];
        as_bytes_mut(&mut back).copy_from_slice(&bytes);
        assert_eq!(back, values);
        assert_eq!(type_name(f32::CODE), Some("f32"));
        assert_eq!(type_name(0), None);
    }

    #[test]
    fn half_precision_reduces_through_f32_and_rounds() {
        let h = |v: f32| f16::from_f32(v);
        let mut dst = [h(1.0), h(2048.0), h(-3.0)];
        f16::reduce(&mut dst, &[h(0.5), h(1.0), h(2.0)], ReduceOp::Sum);
        // 2049 is not an f16: the sum rounds to even, 2048.
        assert_eq!(dst, [h(1.5), h(2048.0), h(-1.0)]);
        f16::divide(&mut dst, 2);
        assert_eq!(dst[0], h(0.75));
        let b = |v: f32| bf16::from_f32(v);
        let mut dst = [b(3.0), b(-1.0)];
        bf16::reduce(&mut dst, &[b(2.0), b(4.0)], ReduceOp::Min);
        assert_eq!(dst, [b(2.0), b(-1.0)]);
        bf16::scale(&mut dst, 0.5);
        assert_eq!(dst, [b(1.0), b(-0.5)]);
        assert_eq!(f16::NAME, "f16");
        assert_eq!(type_name(bf16::CODE), Some("bf16"));
    }

    #[test]
    fn small_integers_wrap_and_scale_in_f64_truncated() {
        let mut dst = [250u8, 3];
        u8::reduce(&mut dst, &[10, 4], ReduceOp::Sum);
        assert_eq!(dst, [4, 7]);
        let mut dst = [-128i8, 5];
        i8::reduce(&mut dst, &[-1, -6], ReduceOp::Max);
        assert_eq!(dst, [-1, 5]);
        i8::scale(&mut dst, 0.5);
        assert_eq!(dst, [0, 2]);
        i8::scale(&mut dst, 1000.0);
        assert_eq!(dst, [0, 127]);
    }

    #[test]
    fn bytes_are_viewed_as_elements_only_when_aligned_and_whole() {
        let mut storage = [0i64; 3];
        let bytes = as_bytes_mut(&mut storage);
        assert_eq!(as_elements_mut::<f64>(bytes).map(|e| e.len()), Some(3));
        assert!(as_elements_mut::<f64>(&mut bytes[1..17]).is_none());
        assert!(as_elements_mut::<f64>(&mut bytes[..12]).is_none());
        assert_eq!(
            as_elements_mut::<i32>(&mut bytes[..12]).map(|e| e.len()),
            Some(3)
        );
    }
}
