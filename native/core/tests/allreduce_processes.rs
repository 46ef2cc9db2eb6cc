//! Allreduce among 1 to 5 real processes on 127.0.0.1, checked exactly
//! against a reference each rank computes locally, over shared memory (the
//! default on one host) and over TCP (forced).
//!
//! Data is integer-valued, so float sums are exact whatever the reduction
//! order and every result can be compared with `==`. Non-integer data, whose
//! result depends on the order of reduction, checks that every rank ends
//! with the same bits.

mod common;

use std::time::Duration;

use common::{say, say_err, Job, RankSpec};
use horovod_core::{Communicator, Element, ReduceOp};

/// 16 MiB of f32 plus a remainder that does not divide by any job size.
const LARGE_F32: usize = 4 * 1024 * 1024 + 3;
/// 16 MiB of f64 plus a remainder.
const LARGE_F64: usize = 2 * 1024 * 1024 + 3;

/// More than one shared memory slot (1 MiB) of every element type.
const MULTI_CHUNK_BYTES: usize = 3 * 1024 * 1024 + 12;

/// f32 lengths at the TCP path's switch points and chunk edges: direct
/// exchange up to 4072 bytes (1018 f32), owners up to 512 KiB (131072
/// f32), the ring above, whose slices are `size` x 512 KiB (131072 f32); each
/// just below, at and just above, for every job size.
fn tcp_boundaries(size: usize) -> Vec<usize> {
    let mut lens = Vec::new();
    for edge in [1018, 131_072, 2 * size * 131_072] {
        lens.extend([edge - 1, edge, edge + 1]);
    }
    lens
}

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

/// Order-sensitive allreduces whose results must be bit-identical on every
/// rank: one of each TCP algorithm (direct, owners, ring) and of both shared
/// memory paths.
const HASHED: [(ReduceOp, usize); 4] = [
    (ReduceOp::Sum, 1001),
    (ReduceOp::Sum, 100_003),
    (ReduceOp::Average, 200_001),
    (ReduceOp::Sum, 300_007),
];

/// FNV-1a of the result of reducing order-sensitive floats: equal on every
/// rank exactly when the results are bit-identical.
fn fingerprint(comm: &mut Communicator, op: ReduceOp, len: usize) -> Result<u64, String> {
    let rank = comm.rank() as f64;
    let mut data: Vec<f32> = (0..len)
        .map(|i| ((i as f64 * 0.618_034 + rank * 0.377).sin() * 1e3) as f32)
        .collect();
    comm.allreduce(&mut data, op)
        .map_err(|e| format!("fingerprint {op} of {len}: {e}"))?;
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for value in &data {
        for byte in value.to_ne_bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
        }
    }
    Ok(hash)
}

fn matrix(comm: &mut Communicator) -> Result<usize, String> {
    let n = comm.size();
    let mut lens = vec![0, 1, n.saturating_sub(1), n, n + 1, 1031, 4099];
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
    for op in OPS {
        check::<f32>(comm, op, MULTI_CHUNK_BYTES / 4 + 1)?;
        check::<i64>(comm, op, MULTI_CHUNK_BYTES / 8 + 3)?;
    }
    check::<f64>(comm, ReduceOp::Sum, MULTI_CHUNK_BYTES / 8)?;
    check::<i32>(comm, ReduceOp::Average, MULTI_CHUNK_BYTES / 4 + 7)?;
    let boundaries = tcp_boundaries(n);
    for &len in &boundaries {
        check::<f32>(comm, ReduceOp::Sum, len)?;
        check::<f32>(comm, ReduceOp::Average, len)?;
        check::<i64>(comm, ReduceOp::Max, len / 2)?;
    }
    comm.barrier().map_err(|e| e.to_string())?;
    check::<f32>(comm, ReduceOp::Sum, LARGE_F32)?;
    check::<f64>(comm, ReduceOp::Average, LARGE_F64)?;
    check::<f32>(comm, ReduceOp::Max, LARGE_F32)?;
    comm.barrier().map_err(|e| e.to_string())?;
    for (op, len) in HASHED {
        say(format!("HASH {op} {len} {:x}", fingerprint(comm, op, len)?));
    }
    Ok(cases + 15 + 3 * boundaries.len())
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
        "matrix" => {
            say(format!(
                "SHM {} HIER {}",
                comm.uses_shared_memory(),
                comm.is_hierarchical()
            ));
            match matrix(&mut comm) {
                Ok(cases) => say(format!("OK {cases} cases")),
                Err(failure) => say(format!("FAIL {failure}")),
            }
        }
        "mismatch" => {
            // Rank r reduces base + r elements: every rank must refuse.
            let base = common::var("HVD_TEST_LEN").map_or(10, |v| v.parse().unwrap_or(10));
            let mut data = vec![1.0f32; base + rank];
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

fn run_matrix(size: usize, transport: &str) {
    let spec = RankSpec::default().with(common::TRANSPORT_VAR, transport);
    let mut job = Job::start("matrix", vec![spec; size]);
    job.send_all();
    let outputs = job.finish(Duration::from_secs(120));
    let shm = size > 1 && transport != "tcp";
    for (rank, lines) in outputs.iter().enumerate() {
        assert!(
            lines.last().is_some_and(|l| l.starts_with("OK ")),
            "rank {rank} of {size}: {lines:?}"
        );
        assert_eq!(
            lines[0],
            format!("SHM {shm} HIER false"),
            "rank {rank} of {size}"
        );
        let hashes: Vec<_> = lines.iter().filter(|l| l.starts_with("HASH")).collect();
        let first: Vec<_> = outputs[0]
            .iter()
            .filter(|l| l.starts_with("HASH"))
            .collect();
        assert_eq!(hashes.len(), HASHED.len(), "rank {rank}: {lines:?}");
        assert_eq!(hashes, first, "rank {rank} differs from rank 0");
    }
    common::assert_no_shm_leftovers();
}

#[test]
fn allreduce_one_process() {
    run_matrix(1, "auto");
}

#[test]
fn allreduce_two_processes_shared_memory() {
    run_matrix(2, "auto");
}

#[test]
fn allreduce_three_processes_shared_memory() {
    run_matrix(3, "auto");
}

#[test]
fn allreduce_four_processes_shared_memory() {
    run_matrix(4, "auto");
}

#[test]
fn allreduce_five_processes_shared_memory() {
    run_matrix(5, "auto");
}

#[test]
fn allreduce_two_processes_tcp() {
    run_matrix(2, "tcp");
}

#[test]
fn allreduce_three_processes_tcp() {
    run_matrix(3, "tcp");
}

#[test]
fn allreduce_four_processes_tcp() {
    run_matrix(4, "tcp");
}

#[test]
fn allreduce_five_processes_tcp() {
    run_matrix(5, "tcp");
}

#[test]
fn mixed_transports_agree_on_tcp() {
    let auto = RankSpec::default().with(common::TRANSPORT_VAR, "auto");
    let tcp = RankSpec::default().with(common::TRANSPORT_VAR, "tcp");
    let mut job = Job::start("matrix", vec![auto.clone(), tcp, auto]);
    job.send_all();
    for (rank, lines) in job.finish(Duration::from_secs(120)).iter().enumerate() {
        assert_eq!(lines[0], "SHM false HIER false", "rank {rank}: {lines:?}");
        assert!(
            lines.last().is_some_and(|l| l.starts_with("OK ")),
            "{lines:?}"
        );
    }
}

/// Ranks on "hosts" named by `hosts[rank]`: every host name resolves to
/// this machine, but ranks group by the name, so ranks of one name share
/// memory and different names talk over TCP (the hierarchical allreduce).
fn run_hierarchical(hosts: &[&str]) {
    run_on_hosts(hosts, "auto", true);
}

/// The matrix on ranks placed on `hosts`, with `transport`; `hierarchical`
/// is whether allreduce must have levels.
fn run_on_hosts(hosts: &[&str], transport: &str, hierarchical: bool) {
    let spec = RankSpec::default().with(common::TRANSPORT_VAR, transport);
    let mut job = Job::start("matrix", vec![spec; hosts.len()]);
    job.send_all_on_hosts(hosts);
    let outputs = job.finish(Duration::from_secs(120));
    for (rank, lines) in outputs.iter().enumerate() {
        assert_eq!(
            lines[0],
            format!("SHM false HIER {hierarchical}"),
            "rank {rank} of {hosts:?}"
        );
        assert!(
            lines.last().is_some_and(|l| l.starts_with("OK ")),
            "rank {rank} of {hosts:?}: {lines:?}"
        );
        let hashes = |lines: &[String]| {
            lines
                .iter()
                .filter(|l| l.starts_with("HASH"))
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(hashes(lines), hashes(&outputs[0]), "rank {rank} differs");
    }
    common::assert_no_shm_leftovers();
}

#[test]
fn hierarchical_two_hosts_of_two_ranks() {
    run_hierarchical(&["127.0.0.1", "127.0.0.1", "localhost", "localhost"]);
}

#[test]
fn hierarchical_three_interleaved_hosts_of_two_ranks() {
    // Equal hosts: large messages are sharded, one cross-host communicator
    // per local rank. "127.1" is a third name for this machine.
    run_hierarchical(&[
        "127.0.0.1",
        "localhost",
        "127.1",
        "localhost",
        "127.0.0.1",
        "127.1",
    ]);
}

#[test]
fn flat_transport_keeps_two_hosts_on_one_level() {
    run_on_hosts(
        &["127.0.0.1", "127.0.0.1", "localhost", "localhost"],
        "flat",
        false,
    );
}

#[test]
fn hierarchical_uneven_interleaved_hosts() {
    run_hierarchical(&[
        "127.0.0.1",
        "localhost",
        "127.0.0.1",
        "localhost",
        "127.0.0.1",
    ]);
}

#[test]
fn mismatched_lengths_fail_on_every_rank() {
    // 10 f32 by direct exchange over TCP; 100 000 by the owners algorithm;
    // 1 000 000 around the ring.
    for (transport, base) in [
        ("auto", 10),
        ("tcp", 10),
        ("tcp", 100_000),
        ("tcp", 1_000_000),
    ] {
        mismatched_lengths_fail(transport, base);
    }
}

fn mismatched_lengths_fail(transport: &str, base: usize) {
    let spec = RankSpec::default()
        .with(common::TRANSPORT_VAR, transport)
        .with("HVD_TEST_LEN", base);
    let mut job = Job::start("mismatch", vec![spec; 3]);
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
