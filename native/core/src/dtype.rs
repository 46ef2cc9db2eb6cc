//! Element types known at run time.
//!
//! The typed API ([`crate::Element`]) fixes the element type at compile time.
//! Callers that hold untyped bytes (the JNI gateway, the negotiation engine,
//! fusion buffers) name the type with a [`DataType`] instead, and
//! [`with_dtype!`](crate::with_dtype) turns that value back into a type
//! parameter, so the untyped entry points dispatch to the same typed code.
//!
//! Invariant: `DataType::X.code()` equals `<x as Element>::CODE` for every
//! type, so a header built from either names the same type on the wire.

use std::fmt;

/// One of the element types collectives work on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `u8`: unsigned bytes.
    U8,
    /// `i8`: signed bytes (Java's `byte`).
    I8,
    /// `i16`: Java's `short`.
    I16,
    /// `i32`: Java's `int`.
    I32,
    /// `i64`: Java's `long`.
    I64,
    /// IEEE 754 half precision ([`half::f16`]).
    F16,
    /// bfloat16 ([`half::bf16`]): `f32`'s exponent with a 7-bit mantissa.
    Bf16,
    /// `f32`: Java's `float`.
    F32,
    /// `f64`: Java's `double`.
    F64,
}

impl DataType {
    /// Every data type.
    pub const ALL: [DataType; 9] = [
        DataType::U8,
        DataType::I8,
        DataType::I16,
        DataType::I32,
        DataType::I64,
        DataType::F16,
        DataType::Bf16,
        DataType::F32,
        DataType::F64,
    ];

    /// The lower-case Rust name, e.g. "f32" or "bf16".
    pub const fn name(self) -> &'static str {
        match self {
            DataType::U8 => "u8",
            DataType::I8 => "i8",
            DataType::I16 => "i16",
            DataType::I32 => "i32",
            DataType::I64 => "i64",
            DataType::F16 => "f16",
            DataType::Bf16 => "bf16",
            DataType::F32 => "f32",
            DataType::F64 => "f64",
        }
    }

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::U8 | DataType::I8 => 1,
            DataType::I16 | DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::F32 => 4,
            DataType::I64 | DataType::F64 => 8,
        }
    }

    /// Code of the type in collective headers on the wire. The first four
    /// are those of the first protocol version.
    pub const fn code(self) -> u8 {
        match self {
            DataType::F32 => 1,
            DataType::F64 => 2,
            DataType::I32 => 3,
            DataType::I64 => 4,
            DataType::U8 => 5,
            DataType::I8 => 6,
            DataType::F16 => 7,
            DataType::Bf16 => 8,
            DataType::I16 => 9,
        }
    }

    /// True for the floating-point types, the only ones that take scale
    /// factors and compression.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F16 | DataType::Bf16 | DataType::F32 | DataType::F64
        )
    }

    /// The type with wire code `code`.
    pub fn from_code(code: u8) -> Option<DataType> {
        DataType::ALL.into_iter().find(|t| t.code() == code)
    }

    /// Parses a name as returned by [`DataType::name`], ignoring case.
    pub fn from_name(name: &str) -> Option<DataType> {
        DataType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Evaluates `$body` with the type alias `$t` bound to the Rust type of the
/// [`DataType`] `$dtype`: the bridge from untyped bytes to the typed code.
///
/// ```
/// use horovod_core::{with_dtype, DataType, Element};
/// let name = with_dtype!(DataType::Bf16, T => T::NAME);
/// assert_eq!(name, "bf16");
/// ```
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::DataType::U8 => {
                type $t = u8;
                $body
            }
            $crate::DataType::I8 => {
                type $t = i8;
                $body
            }
            $crate::DataType::I16 => {
                type $t = i16;
                $body
            }
            $crate::DataType::I32 => {
                type $t = i32;
                $body
            }
            $crate::DataType::I64 => {
                type $t = i64;
                $body
            }
            $crate::DataType::F16 => {
                type $t = $crate::f16;
                $body
            }
            $crate::DataType::Bf16 => {
                type $t = $crate::bf16;
                $body
            }
            $crate::DataType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DataType::F64 => {
                type $t = f64;
                $body
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reduce::Element;

    #[test]
    fn codes_names_and_sizes_agree_with_the_element_types() {
        for dtype in DataType::ALL {
            let (name, code, size) =
                with_dtype!(dtype, T => (T::NAME, T::CODE, std::mem::size_of::<T>()));
            assert_eq!(dtype.name(), name);
            assert_eq!(dtype.code(), code);
            assert_eq!(dtype.size(), size);
            assert_eq!(DataType::from_code(code), Some(dtype));
            assert_eq!(DataType::from_name(&name.to_uppercase()), Some(dtype));
        }
        assert_eq!(DataType::from_code(0), None);
        assert_eq!(DataType::from_name("float"), None);
        assert!(DataType::Bf16.is_float() && !DataType::U8.is_float());
    }
}
