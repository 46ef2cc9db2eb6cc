//! Arrow buffers from the JVM into a [`Table`], by address.
//!
//! On the executor, the JVM writes each batch of a partition's rows into
//! Arrow `float32` vectors, one per column, `width` values per row (a
//! fixed-size list's child buffer when `width > 1`), and passes their data
//! buffers' addresses. Rows with nulls, ragged arrays or NaN labels are
//! dropped or reported on the JVM side before they are written, so every
//! buffer here is dense, with no nulls.
//!
//! # Design
//! The JVM owns the buffers: they stay allocated for the duration of the
//! call that passes them, and are released or reused by the JVM afterwards.
//! Rust copies what it reads into the table's own vectors, so nothing here
//! outlives the call.

use crate::table::{Table, TableError};

/// Appends `rows` rows to `table` from one data buffer per column.
///
/// # Safety
/// `addresses[i]` must point to `rows * width` initialised, aligned `f32`
/// values of the table's column `i`, readable for the whole call and not
/// written by anyone during it.
pub unsafe fn append_from_addresses(
    table: &mut Table,
    addresses: &[i64],
    rows: usize,
) -> Result<(), TableError> {
    if addresses.len() != table.columns().len() {
        return Err(TableError::Arity {
            expected: table.columns().len(),
            found: addresses.len(),
        });
    }
    let slices: Vec<&[f32]> = addresses
        .iter()
        .zip(table.columns())
        .map(|(&address, column)| {
            let len = rows * column.width();
            if len == 0 {
                return &[][..];
            }
            // SAFETY: the caller guarantees `len` readable f32 values at `address`.
            unsafe { std::slice::from_raw_parts(address as *const f32, len) }
        })
        .collect();
    table.extend_rows(&slices, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Column;

    #[test]
    fn copies_each_columns_buffer() {
        let mut table = Table::new(
            0,
            vec![Column::new("a", 1, vec![]), Column::new("v", 3, vec![])],
        )
        .unwrap();
        let a = [1.0f32, 2.0];
        let v = [0.5f32, 1.5, 2.5, 3.5, 4.5, 5.5];
        // SAFETY: both buffers hold rows x width values and live across the call.
        unsafe {
            append_from_addresses(&mut table, &[a.as_ptr() as i64, v.as_ptr() as i64], 2).unwrap()
        };
        unsafe {
            append_from_addresses(&mut table, &[a.as_ptr() as i64, v.as_ptr() as i64], 1).unwrap()
        };
        assert_eq!(table.rows(), 3);
        assert_eq!(table.column("a").unwrap().values(), &[1.0, 2.0, 1.0]);
        assert_eq!(table.column("v").unwrap().row(2), &[0.5, 1.5, 2.5]);
        // SAFETY: the wrong arity is refused before any address is read.
        let err = unsafe { append_from_addresses(&mut table, &[a.as_ptr() as i64], 1) };
        assert!(matches!(
            err,
            Err(TableError::Arity {
                expected: 2,
                found: 1
            })
        ));
    }
}
