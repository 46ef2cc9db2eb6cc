//! Every collective, element type and reduce operation among 1 to 5 real
//! processes on 127.0.0.1, checked exactly against a reference each rank
//! computes locally. One process set per job size runs the whole matrix.
//!
//! Values are small integers (smaller still for the half-precision types),
//! so every float result is exact whatever the reduction order, and the
//! reference can reduce with the element types' own reduce loops.

mod common;

use std::ops::Range;

use common::say;
use horovod_core::{
    bf16, f16, AllreduceOptions, Communicator, Compression, DataType, Element, ReduceOp,
};

const OPS: [ReduceOp; 5] = [
    ReduceOp::Sum,
    ReduceOp::Average,
    ReduceOp::Min,
    ReduceOp::Max,
    ReduceOp::Product,
];

type Outcome = Result<(), String>;

/// Element types the test can make values of.
trait Sample: Element {
    /// Values stay within ±LIMIT so that sums of five ranks are exact.
    const LIMIT: i64;
    fn of(value: i64) -> Self;
}

macro_rules! sample {
    ($t:ty, $limit:expr, $of:expr) => {
        impl Sample for $t {
            const LIMIT: i64 = $limit;
            fn of(value: i64) -> Self {
                $of(value)
            }
        }
    };
}
sample!(u8, 1000, |v: i64| v as u8);
sample!(i8, 1000, |v: i64| v as i8);
sample!(i32, 1000, |v: i64| v as i32);
sample!(i64, 1000, |v: i64| v);
sample!(f16, 200, |v: i64| f16::from_f32(v as f32));
sample!(bf16, 50, |v: i64| bf16::from_f32(v as f32));
sample!(f32, 1000, |v: i64| v as f32);
sample!(f64, 1000, |v: i64| v as f64);

/// Rank `rank`'s input of `len` elements: factors of ±1 and 2 for products
/// so they stay exact, small integers otherwise; `salt` varies the values
/// between cases.
fn input<T: Sample>(op: ReduceOp, rank: usize, len: usize, salt: usize) -> Vec<T> {
    let span = (2 * T::LIMIT + 1) as usize;
    (0..len)
        .map(|i| match op {
            ReduceOp::Product => T::of([1, -1, 2, 1, 1][(i + rank + salt) % 5]),
            _ => T::of(((i * 7919 + rank * 104_729 + salt * 31) % span) as i64 - T::LIMIT),
        })
        .collect()
}

/// The allreduce of every rank's input, computed locally.
fn reference<T: Sample>(op: ReduceOp, size: usize, len: usize, salt: usize) -> Vec<T> {
    let mut acc = input::<T>(op, 0, len, salt);
    for rank in 1..size {
        T::reduce(&mut acc, &input::<T>(op, rank, len, salt), op);
    }
    if op == ReduceOp::Average {
        T::divide(&mut acc, size);
    }
    acc
}

fn same<T: Element>(what: &str, got: &[T], want: &[T]) -> Outcome {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} elements, expected {}",
            got.len(),
            want.len()
        ));
    }
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: element {i} is {:?}, expected {:?}",
            got[i], want[i]
        )),
    }
}

fn err(what: &str) -> impl Fn(horovod_core::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Segment `index` of `len` elements split into `parts`, the first ones
/// longer: what reducescatter gives rank `index`.
fn segment(len: usize, parts: usize, index: usize) -> Range<usize> {
    let (base, extra) = (len / parts, len % parts);
    let start = index * base + index.min(extra);
    start..start + base + usize::from(index < extra)
}

fn allreduce_cases<T: Sample>(comm: &mut Communicator, lens: &[usize]) -> Outcome {
    let (rank, size) = (comm.rank(), comm.size());
    for op in OPS {
        for &len in lens {
            let what = format!("allreduce {} {op} of {len}", T::NAME);
            let mut data = input::<T>(op, rank, len, 0);
            comm.allreduce(&mut data, op).map_err(err(&what))?;
            same(&what, &data, &reference::<T>(op, size, len, 0))?;
        }
    }
    // Untyped and misaligned: the bytes start one past an aligned address.
    let what = format!("allreduce_bytes {}", T::NAME);
    let want = reference::<T>(ReduceOp::Sum, size, 37, 1);
    let data = input::<T>(ReduceOp::Sum, rank, 37, 1);
    let bytes: Vec<u8> = data.iter().flat_map(|x| to_bytes(x)).collect();
    let mut storage = vec![0u8; bytes.len() + 1];
    storage[1..].copy_from_slice(&bytes);
    comm.allreduce_bytes(T::DTYPE, &mut storage[1..], ReduceOp::Sum)
        .map_err(err(&what))?;
    let want_bytes: Vec<u8> = want.iter().flat_map(|x| to_bytes(x)).collect();
    same(&what, &storage[1..], &want_bytes)
}

fn to_bytes<T: Element>(x: &T) -> Vec<u8> {
    // SAFETY: `Element` types are plain data without padding.
    unsafe { std::slice::from_raw_parts((x as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
        .to_vec()
}

fn scaled_and_compressed(comm: &mut Communicator) -> Outcome {
    let (rank, size) = (comm.rank(), comm.size());
    let len = 1000;
    // Even inputs halved, summed, then scaled by 4: exactly twice the sum.
    let mut data: Vec<f32> = input::<f32>(ReduceOp::Sum, rank, len, 2)
        .iter()
        .map(|x| 2.0 * x)
        .collect();
    let options = AllreduceOptions::new(ReduceOp::Sum)
        .with_prescale(0.5)
        .with_postscale(4.0);
    comm.allreduce_with(&mut data, options)
        .map_err(err("scaled f32"))?;
    let want: Vec<f32> = reference::<f32>(ReduceOp::Sum, size, len, 2)
        .iter()
        .map(|x| 4.0 * x)
        .collect();
    same("scaled f32", &data, &want)?;

    let mut data = input::<f16>(ReduceOp::Max, rank, len, 3);
    let options = AllreduceOptions::new(ReduceOp::Max)
        .with_prescale(2.0)
        .with_postscale(0.5);
    comm.allreduce_with(&mut data, options)
        .map_err(err("scaled f16"))?;
    same(
        "scaled f16",
        &data,
        &reference::<f16>(ReduceOp::Max, size, len, 3),
    )?;

    // Values within f16's exact range survive compression unchanged.
    let mut data = input::<f16>(ReduceOp::Sum, rank, len, 4)
        .iter()
        .map(|x| f64::from(x.to_f32()))
        .collect::<Vec<f64>>();
    let options = AllreduceOptions::new(ReduceOp::Sum).with_compression(Compression::Fp16);
    comm.allreduce_with(&mut data, options)
        .map_err(err("compressed f64"))?;
    let want: Vec<f64> = reference::<f16>(ReduceOp::Sum, size, len, 4)
        .iter()
        .map(|x| f64::from(x.to_f32()))
        .collect();
    same("compressed f64", &data, &want)?;

    // Grouped: three tensors, one empty, reduced as one.
    let lens = [0, 5, size + 2];
    let mut tensors: Vec<Vec<i32>> = lens
        .iter()
        .enumerate()
        .map(|(t, &len)| input::<i32>(ReduceOp::Sum, rank, len, 10 + t))
        .collect();
    let mut views: Vec<&mut [i32]> = tensors.iter_mut().map(Vec::as_mut_slice).collect();
    comm.grouped_allreduce(&mut views, ReduceOp::Sum)
        .map_err(err("grouped i32"))?;
    for (t, &len) in lens.iter().enumerate() {
        let want = reference::<i32>(ReduceOp::Sum, size, len, 10 + t);
        same(&format!("grouped tensor {t}"), &tensors[t], &want)?;
    }
    Ok(())
}

fn allgather_cases<T: Sample>(comm: &mut Communicator, scale: usize) -> Outcome {
    let (rank, size) = (comm.rank(), comm.size());
    // Rank 0 contributes nothing; the others differ.
    let count = |r: usize| (r * 3 % 4) * scale;
    let what = format!("allgather {} x{scale}", T::NAME);
    let mine = input::<T>(ReduceOp::Sum, rank, count(rank), 5);
    let (all, counts) = comm.allgather(&mine).map_err(err(&what))?;
    let want_counts: Vec<usize> = (0..size).map(count).collect();
    if counts != want_counts {
        return Err(format!(
            "{what}: counts {counts:?}, expected {want_counts:?}"
        ));
    }
    let want: Vec<T> = (0..size)
        .flat_map(|r| input::<T>(ReduceOp::Sum, r, count(r), 5))
        .collect();
    same(&what, &all, &want)
}

fn broadcast_cases<T: Sample>(comm: &mut Communicator, lens: &[usize]) -> Outcome {
    let (rank, size) = (comm.rank(), comm.size());
    for root in 0..size {
        for &len in lens {
            let what = format!("broadcast {} of {len} from {root}", T::NAME);
            let mut data = input::<T>(ReduceOp::Sum, rank, len, 6);
            comm.broadcast(&mut data, root).map_err(err(&what))?;
            same(&what, &data, &input::<T>(ReduceOp::Sum, root, len, 6))?;
        }
    }
    Ok(())
}

/// What rank `from` sends rank `to` in alltoall: `split(from, to)` elements.
fn block<T: Sample>(from: usize, to: usize, len: usize) -> Vec<T> {
    input::<T>(ReduceOp::Sum, from * 7 + to, len, 7)
}

fn alltoall_cases<T: Sample>(comm: &mut Communicator, scale: usize) -> Outcome {
    let (rank, size) = (comm.rank(), comm.size());
    // Zeros included; rank r sends more to some peers than to others.
    let split = |from: usize, to: usize| ((from + 2 * to) % 3) * scale;
    let what = format!("alltoall {} x{scale}", T::NAME);
    let splits: Vec<usize> = (0..size).map(|to| split(rank, to)).collect();
    let data: Vec<T> = (0..size)
        .flat_map(|to| block::<T>(rank, to, split(rank, to)))
        .collect();
    let (got, received) = comm.alltoall(&data, &splits).map_err(err(&what))?;
    let want_received: Vec<usize> = (0..size).map(|from| split(from, rank)).collect();
    if received != want_received {
        return Err(format!(
            "{what}: received splits {received:?}, expected {want_received:?}"
        ));
    }
    let want: Vec<T> = (0..size)
        .flat_map(|from| block::<T>(from, rank, split(from, rank)))
        .collect();
    same(&what, &got, &want)
}

fn reducescatter_cases<T: Sample>(comm: &mut Communicator) -> Outcome {
    let (rank, size) = (comm.rank(), comm.size());
    let mut lens = vec![0, 1, size.saturating_sub(1), 2 * size + 1, 1031];
    lens.dedup();
    for op in OPS {
        for &len in &lens {
            let what = format!("reducescatter {} {op} of {len}", T::NAME);
            let data = input::<T>(op, rank, len, 8);
            let mine = comm.reducescatter(&data, op).map_err(err(&what))?;
            let want = reference::<T>(op, size, len, 8);
            same(&what, &mine, &want[segment(len, size, rank)])?;
        }
    }
    Ok(())
}

/// Runs `$check::<T>($comm, $arg)` for every element type.
macro_rules! every_type {
    ($check:ident, $comm:expr $(, $arg:expr)*) => {{
        $check::<u8>($comm $(, $arg)*)?;
        $check::<i8>($comm $(, $arg)*)?;
        $check::<i32>($comm $(, $arg)*)?;
        $check::<i64>($comm $(, $arg)*)?;
        $check::<f16>($comm $(, $arg)*)?;
        $check::<bf16>($comm $(, $arg)*)?;
        $check::<f32>($comm $(, $arg)*)?;
        $check::<f64>($comm $(, $arg)*)?;
    }};
}

fn matrix(comm: &mut Communicator) -> Outcome {
    let n = comm.size();
    let lens = [0, 1, n + 1, 1031];
    every_type!(allreduce_cases, comm, &lens);
    scaled_and_compressed(comm)?;
    every_type!(allgather_cases, comm, 1);
    allgather_cases::<f32>(comm, 100_001)?;
    every_type!(broadcast_cases, comm, &[0, 3, 1000]);
    broadcast_cases::<f64>(comm, &[300_001])?;
    every_type!(alltoall_cases, comm, 1);
    alltoall_cases::<i64>(comm, 50_001)?;
    every_type!(reducescatter_cases, comm);
    comm.barrier().map_err(err("closing barrier"))?;
    // Every data type name round-trips, so the engine can name them.
    for dtype in DataType::ALL {
        if DataType::from_name(dtype.name()) != Some(dtype) {
            return Err(format!("{dtype} does not round-trip"));
        }
    }
    Ok(())
}

/// Entry point of the rank processes; a no-op in the parent.
#[test]
fn child_entry() {
    let Some(mut comm) = common::connected_child() else {
        return;
    };
    match common::scenario().as_str() {
        "collectives" => match matrix(&mut comm) {
            Ok(()) => say("OK"),
            Err(failure) => say(format!("FAIL {failure}")),
        },
        other => panic!("unknown scenario {other}"),
    }
}

fn run_matrix(size: usize) {
    common::run_all_ok("collectives", size);
}

#[test]
fn every_collective_on_one_process() {
    run_matrix(1);
}

#[test]
fn every_collective_on_two_processes() {
    run_matrix(2);
}

#[test]
fn every_collective_on_three_processes() {
    run_matrix(3);
}

#[test]
fn every_collective_on_four_processes() {
    run_matrix(4);
}

#[test]
fn every_collective_on_five_processes() {
    run_matrix(5);
}
