//! Rendezvous among real processes on 127.0.0.1: a rank with the wrong
//! secret is refused fast, strangers connecting to a listener do not stop the
//! genuine ranks, and ranks given different job sizes say so.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{parse_err, say, say_err, Job, RankSpec};
use horovod_core::ReduceOp;

/// Entry point of the rank processes; a no-op in the parent.
#[test]
fn child_entry() {
    let Some(rank) = common::child_rank() else {
        return;
    };
    assert_eq!(common::scenario(), "join");
    let (result, took) = common::rendezvous(rank);
    let mut comm = match result {
        Ok(comm) => comm,
        Err(e) => return say_err(&e),
    };
    say(format!("CONNECTED {}", took.as_millis()));
    let mut data = vec![rank as f64 + 1.0; 5];
    match comm.allreduce(&mut data, ReduceOp::Sum) {
        Ok(()) => {
            let n = comm.size() as f64;
            assert_eq!(data, vec![n * (n + 1.0) / 2.0; 5]);
            say("OK");
        }
        Err(e) => say_err(&e),
    }
}

fn quick(secret: &str) -> RankSpec {
    RankSpec {
        secret: secret.into(),
        connect_ms: 1_500,
        ..RankSpec::default()
    }
}

/// Asserts `line` is "ERR <kind> ..." containing `needle`.
fn assert_err(line: &str, kind: &str, needle: &str) {
    let (got, message) = parse_err(line);
    assert_eq!(got, kind, "{line}");
    assert!(message.contains(needle), "{needle:?} not in {line}");
}

/// Asserts `line` is the error of a rank whose peer `peer` holds another
/// secret: that peer failed to prove it, or it ended first and its rejected
/// dial says why.
fn assert_secret_fault(line: &str, peer: &str) {
    let (kind, message) = parse_err(line);
    assert!(["AuthFailed", "PeerLost"].contains(&kind), "{line}");
    assert!(message.contains(peer), "{peer:?} not in {line}");
    assert!(message.contains("secret"), "no secret in {line}");
}

#[test]
fn wrong_secret_on_connecting_rank_is_refused() {
    let mut job = Job::start(
        "join",
        vec![quick(common::SECRET), quick("not-the-job-secret")],
    );
    let started = Instant::now();
    job.send_all();
    let line = job.expect(1, "ERR", Duration::from_secs(10));
    assert!(
        started.elapsed() < Duration::from_millis(1_000),
        "slow refusal"
    );
    assert_secret_fault(&line, "rank 0");
    // The genuine rank, dialling rank 1 as well, fails as fast: rank 1
    // cannot prove the secret, or ended before it answered, and its own
    // dial was rejected for the secret.
    let line = job.expect(0, "ERR", Duration::from_secs(10));
    assert_secret_fault(&line, "rank 1");
    assert!(
        started.elapsed() < Duration::from_millis(5_000),
        "slow refusal"
    );
    job.finish(Duration::from_secs(10));
}

#[test]
fn wrong_secret_on_accepting_rank_is_refused() {
    let mut job = Job::start(
        "join",
        vec![quick("not-the-job-secret"), quick(common::SECRET)],
    );
    let started = Instant::now();
    job.send_all();
    let line = job.expect(1, "ERR", Duration::from_secs(10));
    assert!(
        started.elapsed() < Duration::from_millis(1_000),
        "slow refusal"
    );
    assert_secret_fault(&line, "rank 0");
    let line = job.expect(0, "ERR", Duration::from_secs(10));
    assert_secret_fault(&line, "rank 1");
    assert!(
        started.elapsed() < Duration::from_millis(5_000),
        "slow refusal"
    );
    job.finish(Duration::from_secs(10));
}

#[test]
fn unauthenticated_connections_do_not_block_rendezvous() {
    let specs = vec![
        RankSpec {
            connect_ms: 10_000,
            ..RankSpec::default()
        };
        3
    ];
    let mut job = Job::start("join", specs);
    let at = |rank: usize| format!("127.0.0.1:{}", job.port(rank));
    // Strangers reach the listeners before the genuine ranks do.
    let silent_0 = TcpStream::connect(at(0)).unwrap();
    let silent_1 = TcpStream::connect(at(1)).unwrap();
    let mut garbage = TcpStream::connect(at(0)).unwrap();
    garbage.write_all(&[0xAB; 4096]).unwrap();
    let mut half_hello = TcpStream::connect(at(1)).unwrap();
    half_hello.write_all(b"HOROV").unwrap();
    drop(half_hello);
    drop(TcpStream::connect(at(0)).unwrap());
    job.send_all();
    for rank in 0..3 {
        let line = job.expect(rank, "CONNECTED", Duration::from_secs(15));
        let ms: u64 = line["CONNECTED ".len()..].parse().unwrap();
        assert!(
            ms < 5_000,
            "rank {rank} waited {ms} ms for the genuine ranks"
        );
    }
    for (rank, lines) in job.finish(Duration::from_secs(15)).iter().enumerate() {
        assert_eq!(lines, &["OK"], "rank {rank}");
    }
    drop((silent_0, silent_1, garbage));
}

#[test]
fn ranks_given_different_sizes_both_report_it() {
    let mut job = Job::start("join", vec![quick(common::SECRET); 2]);
    let genuine = job.addresses();
    job.send_addresses(0, &genuine);
    // Rank 1 believes in a third rank at a port nobody listens on.
    let mut longer = genuine.clone();
    longer.push("127.0.0.1:1".into());
    job.send_addresses(1, &longer);
    let line = job.expect(1, "ERR", Duration::from_secs(10));
    assert_err(&line, "Mismatch", "it was given 2 ranks, this rank 3");
    let line = job.expect(0, "ERR", Duration::from_secs(10));
    assert_err(&line, "Mismatch", "it was given 3 ranks, this rank 2");
    job.finish(Duration::from_secs(10));
}
