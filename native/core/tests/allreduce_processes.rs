//! Allreduce among 1 to 4 real processes on 127.0.0.1, checked exactly
//! against a reference each rank computes locally.
//!
//! Data is integer-valued, so float sums are exact whatever the reduction
//! order and every result can be compared with `==`.

mod common;

use std::time::Duration;

use common::{say, say_err, Job, RankSpec};
use horovod_core::{Communicator, Element, ReduceOp};

/// 16 MiB of f32 plus a remainder that does not divide by any job size.
const LARGE_F32: usize = 4 * 1024 * 1024 + 3;
/// 16 MiB of f64 plus a remainder.
const LARGE_F64: usize = 2 * 1024 * 1024 + 3;

const OPS: [ReduceOp; 5] = [
    ReduceOp::Sum,
    ReduceOp::Average,
    ReduceOp::Min,
    ReduceOp::Max,
    ReduceOp::Product,
];

/// Element types the reference can be computed for.
trait Sample: Element {
    fn of(value: i64) -> Self;
    fn apply(a: Self, b: Self, op: ReduceOp) -> Self;
    fn div(self, n: usize) -> Self;
}

macro_rules! sample {
    ($t:ty) => {
        impl Sample for $t {
            fn of(value: i64) -> Self {
                value as $t
            }
            fn apply(a: Self, b: Self, op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Average => a + b,
                    ReduceOp::Product => a * b,
                    ReduceOp::Min => {
                        if b < a {
                            b
                        } else {
                            a
                        }
                    }
                    ReduceOp::Max => {
                        if b > a {
                            b
                        } else {
                            a
                        }
                    }
                }
            }
            fn div(self, n: usize) -> Self {
                self / n as $t
            }
        }
    };
}
sample!(f32);
sample!(f64);
sample!(i32);
sample!(i64);

/// Rank `rank`'s input at index `i`: small integers, with factors of ±1 and
/// 2 for products so they stay exact.
fn input(op: ReduceOp, rank: usize, i: usize) -> i64 {
    match op {
        ReduceOp::Product => [1, -1, 2, 1, 1][(i + rank) % 5],
        _ => ((i * 7919 + rank * 104_729) % 2001) as i64 - 1000,
    }
}

fn expected<T: Sample>(op: ReduceOp, size: usize, i: usize) -> T {
    let mut acc = T::of(input(op, 0, i));
    for rank in 1..size {
        acc = T::apply(acc, T::of(input(op, rank, i)), op);
    }
    if op == ReduceOp::Average {
        acc = acc.div(size);
    }
    acc
}

fn check<T: Sample>(comm: &mut Communicator, op: ReduceOp, len: usize) -> Result<(), String> {
    let (rank, size) = (comm.rank(), comm.size());
    let mut data: Vec<T> = (0..len).map(|i| T::of(input(op, rank, i))).collect();
    comm.allreduce(&mut data, op)
        .map_err(|e| format!("{} {op} of {len}: {e}", T::NAME))?;
    for (i, got) in data.iter().enumerate() {
        let want = expected::<T>(op, size, i);
        if *got != want {
            return Err(format!(
                "{} {op} of {len}: element {i} is {got:?}, expected {want:?}",
                T::NAME
            ));
        }
    }
    Ok(())
}

fn matrix(comm: &mut Communicator) -> Result<usize, String> {
    let n = comm.size();
    let mut lens = vec![0, 1, n.saturating_sub(1), n, n + 1, 1031];
    lens.sort_unstable();
    lens.dedup();
    let mut cases = 0;
    for op in OPS {
        for &len in &lens {
            check::<f32>(comm, op, len)?;
            check::<f64>(comm, op, len)?;
            check::<i32>(comm, op, len)?;
            check::<i64>(comm, op, len)?;
            cases += 4;
        }
        comm.barrier().map_err(|e| e.to_string())?;
    }
    check::<f32>(comm, ReduceOp::Sum, LARGE_F32)?;
    check::<f64>(comm, ReduceOp::Average, LARGE_F64)?;
    check::<f32>(comm, ReduceOp::Max, LARGE_F32)?;
    comm.barrier().map_err(|e| e.to_string())?;
    Ok(cases + 3)
}

/// Entry point of the rank processes; a no-op in the parent.
#[test]
fn child_entry() {
    let Some(rank) = common::child_rank() else {
        return;
    };
    let mut comm = match common::rendezvous(rank) {
        (Ok(comm), _) => comm,
        (Err(e), _) => return say_err(&e),
    };
    match common::scenario().as_str() {
        "matrix" => match matrix(&mut comm) {
            Ok(cases) => say(format!("OK {cases} cases")),
            Err(failure) => say(format!("FAIL {failure}")),
        },
        "mismatch" => {
            // Rank r reduces 10 + r elements: every rank must refuse.
            let mut data = vec![1.0f32; 10 + rank];
            match comm.allreduce(&mut data, ReduceOp::Sum) {
                Ok(()) => say("FAIL allreduce of mismatched lengths succeeded"),
                Err(e) => say_err(&e),
            }
            if let Err(e) = comm.barrier() {
                say_err(&e);
            }
        }
        other => panic!("unknown scenario {other}"),
    }
}

fn run_matrix(size: usize) {
    common::run_all_ok("matrix", size);
}

#[test]
fn allreduce_one_process() {
    run_matrix(1);
}

#[test]
fn allreduce_two_processes() {
    run_matrix(2);
}

#[test]
fn allreduce_three_processes() {
    run_matrix(3);
}

#[test]
fn allreduce_four_processes() {
    run_matrix(4);
}

#[test]
fn mismatched_lengths_fail_on_every_rank() {
    let mut job = Job::start("mismatch", vec![RankSpec::default(); 3]);
    job.send_all();
    for (rank, lines) in job.finish(Duration::from_secs(30)).iter().enumerate() {
        assert_eq!(lines.len(), 2, "rank {rank}: {lines:?}");
        let (kind, message) = common::parse_err(&lines[0]);
        // A rank whose predecessor disagrees reports the mismatch; a rank
        // whose predecessor failed first may see the closed connection.
        assert!(
            kind == "Mismatch" || kind == "PeerLost",
            "rank {rank}: {lines:?}"
        );
        if kind == "Mismatch" {
            assert!(message.contains("f32 (SUM)"), "{message}");
        }
        let (kind, _) = common::parse_err(&lines[1]);
        assert_eq!(kind, "Unusable", "rank {rank}: {lines:?}");
    }
}
