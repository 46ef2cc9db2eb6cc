//! Reduction operations and the element types they apply to.
//!
//! [`Element`] is sealed: it is implemented only for primitive integers and
//! floats, which have no padding and for which every bit pattern is a valid
//! value. That invariant is what lets the communicator send a `&[T]` as its
//! raw native-endian bytes and receive bytes straight into a `&mut [T]`
//! ([`as_bytes`], [`as_bytes_mut`]) without a per-element copy.
//!
//! The reduce loops are plain element-wise loops over equal-length slices with
//! the operation chosen outside the loop, so the compiler can vectorise them.

use std::fmt;

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

/// A type an allreduce can reduce: `f32`, `f64`, `i32` and `i64`.
///
/// Sealed: implemented only for primitives without padding whose every bit
/// pattern is valid, which the byte-level transport relies on.
pub trait Element: Copy + Send + Sync + PartialEq + fmt::Debug + 'static + sealed::Sealed {
    /// Name used in error messages, e.g. "f32".
    const NAME: &'static str;
    /// Zero of the type.
    const ZERO: Self;
    /// Code of the type in collective headers on the wire.
    #[doc(hidden)]
    const CODE: u8;

    /// `dst[i] = op(dst[i], src[i])` for every `i`; `Average` sums (the
    /// division happens once, in [`Element::divide`]). The slices have equal
    /// length.
    fn reduce(dst: &mut [Self], src: &[Self], op: ReduceOp);

    /// Divides every element by `n` (the last step of `Average`).
    fn divide(data: &mut [Self], n: usize);
}

#[inline]
fn combine<T: Copy>(dst: &mut [T], src: &[T], f: impl Fn(T, T) -> T) {
    debug_assert_eq!(dst.len(), src.len());
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f(*d, *s);
    }
}

macro_rules! float_element {
    ($t:ty, $code:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = stringify!($t);
            const ZERO: Self = 0.0;
            const CODE: u8 = $code;

            fn reduce(dst: &mut [Self], src: &[Self], op: ReduceOp) {
                match op {
                    ReduceOp::Sum | ReduceOp::Average => combine(dst, src, |a, b| a + b),
                    ReduceOp::Product => combine(dst, src, |a, b| a * b),
                    ReduceOp::Min => combine(dst, src, <$t>::min),
                    ReduceOp::Max => combine(dst, src, <$t>::max),
                }
            }

            fn divide(data: &mut [Self], n: usize) {
                let n = n as $t;
                for x in data {
                    *x /= n;
                }
            }
        }
    };
}

macro_rules! int_element {
    ($t:ty, $code:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = stringify!($t);
            const ZERO: Self = 0;
            const CODE: u8 = $code;

            fn reduce(dst: &mut [Self], src: &[Self], op: ReduceOp) {
                match op {
                    ReduceOp::Sum | ReduceOp::Average => combine(dst, src, <$t>::wrapping_add),
                    ReduceOp::Product => combine(dst, src, <$t>::wrapping_mul),
                    ReduceOp::Min => combine(dst, src, Ord::min),
                    ReduceOp::Max => combine(dst, src, Ord::max),
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
        }
    };
}

float_element!(f32, 1);
float_element!(f64, 2);
int_element!(i32, 3);
int_element!(i64, 4);

/// Name of the element type with wire code `code`, for error messages.
pub(crate) fn type_name(code: u8) -> Option<&'static str> {
    [
        (f32::CODE, f32::NAME),
        (f64::CODE, f64::NAME),
        (i32::CODE, i32::NAME),
        (i64::CODE, i64::NAME),
    ]
    .into_iter()
    .find(|(c, _)| *c == code)
    .map(|(_, name)| name)
}

/// The native-endian bytes of `data`.
pub(crate) fn as_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: `Element` is sealed and implemented only for primitive integers
    // and floats: they have no padding, so every byte of the slice is
    // initialised, and `u8` has alignment 1. The length is the slice's size in
    // bytes and the borrow keeps `data` alive and unaliased by writers.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// The native-endian bytes of `data`, writable.
pub(crate) fn as_bytes_mut<T: Element>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; in addition every bit pattern is a valid value
    // of the primitive types implementing `Element`, so any bytes written
    // through the returned slice leave valid values behind.
    unsafe {
        std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(data))
    }
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
}
