//! A rank that dies, drops its communicator or goes silent mid-collective
//! makes its peers fail promptly with an error naming it, never hang: over
//! shared memory (the default on one host) and over TCP; and a killed rank
//! leaves no shared memory segment behind.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{parse_err, say, say_err, Job, RankSpec};
use horovod_core::ReduceOp;

/// f32 elements per allreduce unless `HVD_TEST_LEN` says otherwise: 4 MiB,
/// which goes around the TCP ring.
const LEN: usize = 1 << 20;

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
    let role = common::var("HVD_TEST_ROLE").unwrap_or_else(|| "loop".into());
    say(format!("READY shm={}", comm.uses_shared_memory()));
    match role.as_str() {
        // Keep the communicator open and never call a collective.
        "silent" => thread::sleep(Duration::from_secs(60)),
        // Close the connections while the process lives on.
        "drop" => {
            thread::sleep(Duration::from_millis(300));
            drop(comm);
            say("DROPPED");
            thread::sleep(Duration::from_secs(60));
        }
        // Allreduce until something fails.
        "loop" => {
            let len = common::var("HVD_TEST_LEN").map_or(LEN, |v| v.parse().unwrap_or(LEN));
            let mut data = vec![1.0f32; len];
            for iteration in 0.. {
                if let Err(e) = comm.allreduce(&mut data, ReduceOp::Sum) {
                    return say_err(&e);
                }
                say(format!("ITER {iteration}"));
            }
        }
        other => panic!("unknown role {other}"),
    }
}

fn role(role: &str) -> RankSpec {
    RankSpec::default().with("HVD_TEST_ROLE", role)
}

#[test]
fn killed_peer_is_reported_as_peer_lost() {
    // Rank 0 blocks in an allreduce that rank 1 never joins; then rank 1 dies.
    let mut job = Job::start("kill", vec![role("loop"), role("silent")]);
    job.send_all();
    job.expect(1, "READY", Duration::from_secs(10));
    job.expect(0, "READY", Duration::from_secs(10));
    thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    job.kill(1);
    let line = job.expect(0, "ERR", Duration::from_secs(10));
    assert!(killed.elapsed() < Duration::from_secs(3), "slow: {line}");
    let (kind, message) = parse_err(&line);
    assert_eq!(kind, "PeerLost", "{line}");
    assert!(
        message.starts_with("connection to rank 1 lost during allreduce"),
        "{line}"
    );
}

#[test]
fn peer_killed_mid_allreduce_fails_every_survivor_fast() {
    killed_mid_allreduce(role("loop"), "shm=true");
    common::assert_no_shm_leftovers();
}

#[test]
fn peer_killed_mid_allreduce_over_tcp_fails_every_survivor_fast() {
    killed_mid_allreduce(role("loop").with(common::TRANSPORT_VAR, "tcp"), "shm=false");
}

#[test]
fn peer_killed_mid_owners_allreduce_over_tcp_fails_every_survivor_fast() {
    // 256 KiB: direct reduce-scatter to owners, then direct allgather.
    let spec = role("loop")
        .with(common::TRANSPORT_VAR, "tcp")
        .with("HVD_TEST_LEN", 64 * 1024);
    killed_mid_allreduce(spec, "shm=false");
}

#[test]
fn peer_killed_mid_ring_over_tcp_fails_every_survivor_fast_with_five_ranks() {
    killed_mid_allreduce_among(
        5,
        role("loop").with(common::TRANSPORT_VAR, "tcp"),
        "shm=false",
    );
}

fn killed_mid_allreduce(spec: RankSpec, transport: &str) {
    killed_mid_allreduce_among(3, spec, transport);
}

/// Kills the last of `size` ranks once it has finished a few allreduces.
fn killed_mid_allreduce_among(size: usize, spec: RankSpec, transport: &str) {
    let mut job = Job::start("kill", vec![spec; size]);
    job.send_all();
    survivors_fail_fast(job, size, transport);
}

/// Kills the last rank of a running `job` of `size` ranks once it has
/// finished a few allreduces; every other rank must fail fast.
fn survivors_fail_fast(mut job: Job, size: usize, transport: &str) {
    let ready = job.expect(0, "READY", Duration::from_secs(10));
    assert_eq!(ready, format!("READY {transport}"));
    let last = size - 1;
    job.expect(last, "ITER 2", Duration::from_secs(30));
    let killed = Instant::now();
    job.kill(last);
    let mut named = false;
    for rank in 0..last {
        let line = job.expect(rank, "ERR", Duration::from_secs(10));
        assert!(killed.elapsed() < Duration::from_secs(3), "slow: {line}");
        let (kind, message) = parse_err(&line);
        // The neighbours of the killed rank see it go; a rank may instead
        // see a neighbour that gave up first, which is PeerLost too.
        assert_eq!(kind, "PeerLost", "rank {rank}: {line}");
        named |= message.starts_with(&format!("connection to rank {last} lost"));
    }
    assert!(named, "no survivor named rank {last}");
}

#[test]
fn peer_killed_mid_hierarchical_allreduce_fails_every_survivor_fast() {
    // Ranks 0, 1 on one "host", 2, 3 on another (both names are this
    // machine); 4 MiB messages are sharded, 1 KiB ones go through leaders.
    for len in [LEN, 256] {
        let mut job = Job::start("kill", vec![role("loop").with("HVD_TEST_LEN", len); 4]);
        job.send_all_on_hosts(&["127.0.0.1", "127.0.0.1", "localhost", "localhost"]);
        survivors_fail_fast(job, 4, "shm=false");
        common::assert_no_shm_leftovers();
    }
}

#[test]
fn dropped_communicator_fails_peer_fast() {
    let mut job = Job::start("drop", vec![role("loop"), role("drop")]);
    job.send_all();
    job.expect(1, "DROPPED", Duration::from_secs(10));
    let dropped = Instant::now();
    let line = job.expect(0, "ERR", Duration::from_secs(10));
    assert!(dropped.elapsed() < Duration::from_secs(3), "slow: {line}");
    let (kind, message) = parse_err(&line);
    assert_eq!(kind, "PeerLost", "{line}");
    assert!(message.starts_with("connection to rank 1 lost"), "{line}");
}

#[test]
fn silent_peer_times_out_naming_it() {
    silent_peer_times_out(RankSpec::default());
}

#[test]
fn silent_peer_times_out_naming_it_over_tcp() {
    for len in [64 * 1024, 1 << 20] {
        silent_peer_times_out(
            RankSpec::default()
                .with(common::TRANSPORT_VAR, "tcp")
                .with("HVD_TEST_LEN", len),
        );
    }
}

/// Rank 0 allreduces (its I/O timeout 700 ms) while rank 1, configured by
/// `spec`, never joins.
fn silent_peer_times_out(spec: RankSpec) {
    let quick_io = RankSpec {
        io_ms: 700,
        ..spec.clone().with("HVD_TEST_ROLE", "loop")
    };
    let silent = spec.with("HVD_TEST_ROLE", "silent");
    let mut job = Job::start("silent", vec![quick_io, silent]);
    job.send_all();
    job.expect(0, "READY", Duration::from_secs(10));
    let started = Instant::now();
    let line = job.expect(0, "ERR", Duration::from_secs(10));
    assert!(started.elapsed() < Duration::from_secs(4), "slow: {line}");
    let (kind, message) = parse_err(&line);
    assert_eq!(kind, "Timeout", "{line}");
    assert!(
        message.contains("after 700ms waiting for rank 1 during allreduce"),
        "{line}"
    );
}
