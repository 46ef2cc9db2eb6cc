//! Columns of `f32` rows, all of the same row count.

use thiserror::Error;

/// What can be wrong with columns put together into a [`Table`].
#[derive(Debug, Error, PartialEq)]
pub enum TableError {
    /// A column's value count is not its width times the row count.
    #[error("column '{name}' has {values} values, expected {rows} rows x width {width}")]
    Length {
        /// The column.
        name: String,
        /// Values it holds.
        values: usize,
        /// Rows of the table.
        rows: usize,
        /// Values per row.
        width: usize,
    },
    /// Two columns share a name.
    #[error("column '{0}' appears twice")]
    Duplicate(String),
    /// Rows were added with values for a different number of columns.
    #[error("{found} columns of values for a table of {expected} columns")]
    Arity {
        /// Columns of the table.
        expected: usize,
        /// Columns of values given.
        found: usize,
    },
    /// A batch holds fewer values than its columns' slots, or more rows than slots.
    #[error("a batch of {values} values cannot hold {rows} rows in slots of {capacity_rows} rows x {width} values")]
    Batch {
        /// Values in the batch.
        values: usize,
        /// Rows it is said to hold.
        rows: usize,
        /// Rows each column's slot has room for.
        capacity_rows: usize,
        /// Values per row over every column.
        width: usize,
    },
    /// Appended tables do not have the same columns.
    #[error("cannot append: columns {found:?} differ from {expected:?}")]
    Schema {
        /// Column names and widths of the table appended to.
        expected: Vec<(String, usize)>,
        /// Column names and widths of the table appended.
        found: Vec<(String, usize)>,
    },
}

/// One named column: `width` values per row, rows one after another.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    name: String,
    width: usize,
    values: Vec<f32>,
}

impl Column {
    /// A column of `values.len() / width` rows.
    pub fn new(name: impl Into<String>, width: usize, values: Vec<f32>) -> Column {
        Column {
            name: name.into(),
            width,
            values,
        }
    }

    /// The column's name, as in the DataFrame.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Values per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Every value, row-major.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// The values of row `row`.
    pub fn row(&self, row: usize) -> &[f32] {
        &self.values[row * self.width..(row + 1) * self.width]
    }

    /// The rows at `rows`, in that order, as one row-major buffer.
    pub fn gather(&self, rows: &[usize]) -> Vec<f32> {
        let mut out = Vec::with_capacity(rows.len() * self.width);
        for &row in rows {
            out.extend_from_slice(self.row(row));
        }
        out
    }
}

/// Columns of equal row count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    rows: usize,
    columns: Vec<Column>,
}

impl Table {
    /// A table of `rows` rows; every column must hold `rows * width` values.
    pub fn new(rows: usize, columns: Vec<Column>) -> Result<Table, TableError> {
        for (i, column) in columns.iter().enumerate() {
            if column.values.len() != rows * column.width {
                return Err(TableError::Length {
                    name: column.name.clone(),
                    values: column.values.len(),
                    rows,
                    width: column.width,
                });
            }
            if columns[..i].iter().any(|c| c.name == column.name) {
                return Err(TableError::Duplicate(column.name.clone()));
            }
        }
        Ok(Table { rows, columns })
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Every column, in order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// Adds `rows` rows: `values[i]` holds `rows * width` values of column `i`.
    pub fn extend_rows(&mut self, values: &[&[f32]], rows: usize) -> Result<(), TableError> {
        if values.len() != self.columns.len() {
            return Err(TableError::Arity {
                expected: self.columns.len(),
                found: values.len(),
            });
        }
        for (column, new) in self.columns.iter().zip(values) {
            if new.len() != rows * column.width {
                return Err(TableError::Length {
                    name: column.name.clone(),
                    values: new.len(),
                    rows,
                    width: column.width,
                });
            }
        }
        for (column, new) in self.columns.iter_mut().zip(values) {
            column.values.extend_from_slice(new);
        }
        self.rows += rows;
        Ok(())
    }

    /// Adds the first `rows` rows of `batch`: the columns' values one column after another, each
    /// in a slot of `capacity_rows * width` values (the JVM's batch buffer, docs/ingest.md).
    pub fn extend_from_batch(
        &mut self,
        batch: &[f32],
        capacity_rows: usize,
        rows: usize,
    ) -> Result<(), TableError> {
        let width: usize = self.columns.iter().map(|c| c.width).sum();
        if rows > capacity_rows || batch.len() < capacity_rows * width {
            return Err(TableError::Batch {
                values: batch.len(),
                rows,
                capacity_rows,
                width,
            });
        }
        let mut slot = 0;
        let values: Vec<&[f32]> = self
            .columns
            .iter()
            .map(|column| {
                let values = &batch[slot..slot + rows * column.width];
                slot += capacity_rows * column.width;
                values
            })
            .collect();
        self.extend_rows(&values, rows)
    }

    /// Adds `other`'s rows after this table's; both must have the same columns.
    /// An empty table without columns takes `other`'s columns.
    pub fn append(&mut self, other: Table) -> Result<(), TableError> {
        if self.columns.is_empty() && self.rows == 0 {
            *self = other;
            return Ok(());
        }
        let shape = |t: &Table| {
            t.columns
                .iter()
                .map(|c| (c.name.clone(), c.width))
                .collect::<Vec<_>>()
        };
        if shape(self) != shape(&other) {
            return Err(TableError::Schema {
                expected: shape(self),
                found: shape(&other),
            });
        }
        for (mine, theirs) in self.columns.iter_mut().zip(other.columns) {
            mine.values.extend_from_slice(&theirs.values);
        }
        self.rows += other.rows;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_filled_rows_of_each_columns_slot() {
        let mut table = Table::new(
            0,
            vec![Column::new("a", 1, vec![]), Column::new("v", 2, vec![])],
        )
        .unwrap();
        // Slots of 3 rows: a = [1, 2, _], v = [(0.5, 1.5), (2.5, 3.5), (_, _)].
        let batch = [1.0, 2.0, 9.0, 0.5, 1.5, 2.5, 3.5, 9.0, 9.0];
        table.extend_from_batch(&batch, 3, 2).unwrap();
        table.extend_from_batch(&batch, 3, 1).unwrap();
        assert_eq!(table.rows(), 3);
        assert_eq!(table.column("a").unwrap().values(), &[1.0, 2.0, 1.0]);
        assert_eq!(table.column("v").unwrap().row(1), &[2.5, 3.5]);
        assert_eq!(table.column("v").unwrap().row(2), &[0.5, 1.5]);
        assert_eq!(
            table
                .extend_from_batch(&batch[..8], 3, 1)
                .unwrap_err()
                .to_string(),
            "a batch of 8 values cannot hold 1 rows in slots of 3 rows x 3 values"
        );
        assert!(table.extend_from_batch(&batch, 3, 4).is_err());
        assert_eq!(table.rows(), 3);
    }

    #[test]
    fn checks_lengths_and_names() {
        let err = Table::new(2, vec![Column::new("a", 2, vec![1.0; 3])]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "column 'a' has 3 values, expected 2 rows x width 2"
        );
        let err = Table::new(
            1,
            vec![
                Column::new("a", 1, vec![1.0]),
                Column::new("a", 1, vec![2.0]),
            ],
        );
        assert_eq!(err.unwrap_err(), TableError::Duplicate("a".into()));
    }

    #[test]
    fn extends_rows_column_by_column() {
        let mut table = Table::new(
            0,
            vec![Column::new("a", 1, vec![]), Column::new("v", 2, vec![])],
        )
        .unwrap();
        table
            .extend_rows(&[&[1.0, 2.0], &[1.0, 1.5, 2.0, 2.5]], 2)
            .unwrap();
        assert_eq!(table.rows(), 2);
        assert_eq!(table.column("v").unwrap().row(1), &[2.0, 2.5]);
        let err = table.extend_rows(&[&[1.0], &[1.0]], 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "column 'v' has 1 values, expected 1 rows x width 2"
        );
        assert!(matches!(
            table.extend_rows(&[&[1.0]], 1),
            Err(TableError::Arity { .. })
        ));
    }

    #[test]
    fn gathers_and_appends_rows() {
        let mut table = Table::new(2, vec![Column::new("v", 2, vec![1.0, 2.0, 3.0, 4.0])]).unwrap();
        table
            .append(Table::new(1, vec![Column::new("v", 2, vec![5.0, 6.0])]).unwrap())
            .unwrap();
        assert_eq!(table.rows(), 3);
        assert_eq!(
            table.column("v").unwrap().gather(&[2, 0]),
            vec![5.0, 6.0, 1.0, 2.0]
        );
        let other = Table::new(1, vec![Column::new("w", 1, vec![0.0])]).unwrap();
        assert!(matches!(
            table.append(other),
            Err(TableError::Schema { .. })
        ));
    }
}
