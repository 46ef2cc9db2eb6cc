//! Reads Parquet files into a `horovod_data::Table` of f32 columns, the
//! tensors the trainer takes, and prints `rows,seconds` on stdout.
//!
//! `horovod-bench-ingest <file>...`: one process per rank, each with its share
//! of the files, as Petastorm's reader does in each of Horovod's ranks.

use std::fs::File;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type};
use arrow_array::Array;
use arrow_schema::DataType;
use horovod_data::{Column, Table};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

fn main() {
    let files: Vec<String> = std::env::args().skip(1).collect();
    let started = Instant::now();
    let mut table: Option<Table> = None;
    for path in &files {
        let file = File::open(path).unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.with_batch_size(8192).build())
            .unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        for batch in reader {
            let batch = batch.unwrap_or_else(|e| panic!("cannot decode {path}: {e}"));
            let schema = batch.schema();
            let columns = batch
                .columns()
                .iter()
                .zip(schema.fields())
                .map(|(array, field)| Column::new(field.name().clone(), 1, to_f32(array.as_ref(), field.name())))
                .collect();
            let part = Table::new(batch.num_rows(), columns).expect("equal lengths");
            match table.as_mut() {
                Some(t) => t.append(part).expect("same columns in every file"),
                None => table = Some(part),
            }
        }
    }
    let rows = table.map(|t| t.rows()).unwrap_or(0);
    println!("{rows},{:.3}", started.elapsed().as_secs_f64());
}

fn to_f32(array: &dyn Array, name: &str) -> Vec<f32> {
    match array.data_type() {
        DataType::Float64 => array.as_primitive::<Float64Type>().values().iter().map(|&v| v as f32).collect(),
        DataType::Float32 => array.as_primitive::<Float32Type>().values().to_vec(),
        DataType::Int32 => array.as_primitive::<Int32Type>().values().iter().map(|&v| v as f32).collect(),
        DataType::Int64 => array.as_primitive::<Int64Type>().values().iter().map(|&v| v as f32).collect(),
        other => panic!("column {name} is {other}, not a number"),
    }
}
