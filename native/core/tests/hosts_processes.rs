//! Simulated hosts: four rank processes on this machine, two "hosts" named
//! by `HOROVOD_HOSTNAME` in each rank's environment, joined through
//! `launch::join_json` as every edge joins. Checks local and cross ranks,
//! that ranks of different hosts talk TCP although their addresses are
//! equal (and share memory without the variable), and that allreduce
//! (small and sharded sizes), allgather and broadcast are right with the
//! hierarchical allreduce on and off.

mod common;

use std::time::Duration;

use common::{say, Job, RankSpec};
use horovod_core::launch::join_json;
use horovod_core::{DataType, Listener, Operation, Payload, ReduceOp, Request};

const WAIT: Duration = Duration::from_secs(30);
/// Ranks 0 and 2 on one host, 1 and 3 on the other: ranks of a host are
/// not adjacent, so placement is by host, not by rank order.
const HOSTS: [&str; 4] = ["node-a", "node-b", "node-a", "node-b"];

fn i64s(values: impl Iterator<Item = i64>) -> Vec<u8> {
    values.flat_map(i64::to_ne_bytes).collect()
}

fn submit(
    engine: &horovod_core::Engine,
    name: &str,
    operation: Operation,
    shape: Vec<usize>,
    data: Vec<u8>,
) -> Result<Vec<u8>, String> {
    let request = Request {
        name: name.into(),
        operation,
        dtype: DataType::I64,
        shape,
        data: Payload::from(data),
    };
    let mut handle = engine.submit(request).map_err(|e| format!("{name}: {e}"))?;
    handle
        .wait(WAIT)
        .map(|output| output.data.into_vec())
        .map_err(|e| format!("{name}: {e}"))
}

/// Joins, reports how, and runs the collectives; `Err` says what was wrong.
fn child(rank: usize) -> Result<String, String> {
    let listener = Listener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    say(format!("PORT {}", listener.port()));
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let entries: Vec<&str> = line.trim().split(',').collect();
    let spec = serde_json::json!({
        "rank": rank, "size": entries.len(), "rendezvous": {"entries": entries},
        "connect_timeout_ms": 20_000, "collective_timeout_ms": 30_000,
    });
    let joined = join_json(
        &spec.to_string(),
        |name| std::env::var(name).ok(),
        common::secret().as_bytes(),
        Some(listener),
    )
    .map_err(|e| format!("join: {e}"))?;
    let p = joined.placement;
    say(format!(
        "PLACED local {}/{} cross {}/{} shm {} hierarchical {}",
        p.local_rank,
        p.local_size,
        p.cross_rank,
        p.cross_size,
        joined.shared_memory,
        joined.hierarchical
    ));
    let (engine, size) = (joined.engine, entries.len() as i64);
    let r = rank as i64;
    // 4 values take the leaders' way, 4,096 (32 KiB) the sharded one.
    for len in [4i64, 4096] {
        let got = submit(
            &engine,
            &format!("sum{len}"),
            Operation::allreduce(ReduceOp::Sum),
            vec![len as usize],
            i64s((0..len).map(|j| 1000 * r + j)),
        )?;
        let want = i64s((0..len).map(|j| 1000 * (0..size).sum::<i64>() + size * j));
        if got != want {
            return Err(format!("allreduce of {len}: wrong sum"));
        }
    }
    let rows = |p: i64| (0..p + 1).map(move |k| 100 * p + k);
    let got = submit(
        &engine,
        "gather",
        Operation::Allgather,
        vec![rank + 1],
        i64s(rows(r)),
    )?;
    if got != i64s((0..size).flat_map(rows)) {
        return Err("allgather: wrong rows".into());
    }
    let got = submit(
        &engine,
        "bcast",
        Operation::Broadcast { root: 1 },
        vec![3],
        i64s((0..3).map(|j| 10 * r + j)),
    )?;
    if got != i64s(10..13) {
        return Err("broadcast from rank 1: wrong values".into());
    }
    Ok("collectives right".into())
}

/// Child entry point; a no-op in the parent.
#[test]
fn child_entry() {
    let Some(rank) = common::child_rank() else {
        return;
    };
    match child(rank) {
        Ok(detail) => say(format!("OK {detail}")),
        Err(failure) => say(format!("FAIL {failure}")),
    }
}

/// Runs four ranks with `env(rank)` added; returns each rank's lines.
fn run(scenario: &str, env: impl Fn(usize) -> Vec<(&'static str, String)>) -> Vec<Vec<String>> {
    let specs = (0..HOSTS.len())
        .map(|rank| {
            env(rank)
                .into_iter()
                .fold(RankSpec::default(), |spec, (k, v)| spec.with(k, v))
        })
        .collect();
    let mut job = Job::start(scenario, specs);
    job.send_all();
    job.finish(Duration::from_secs(60))
}

fn two_hosts(hierarchical: bool) -> Vec<Vec<String>> {
    run("two hosts", |rank| {
        vec![
            ("HOROVOD_HOSTNAME", HOSTS[rank].to_string()),
            (
                "HOROVOD_HIERARCHICAL_ALLREDUCE",
                u8::from(hierarchical).to_string(),
            ),
        ]
    })
}

/// Rank r's placement on two hosts of `HOSTS`: local rank r / 2, cross rank r % 2.
fn placed(rank: usize, hierarchical: bool) -> String {
    format!(
        "PLACED local {}/2 cross {}/2 shm false hierarchical {hierarchical}",
        rank / 2,
        rank % 2
    )
}

#[test]
fn two_simulated_hosts_talk_tcp_across_and_reduce_hierarchically() {
    for (rank, lines) in two_hosts(true).iter().enumerate() {
        assert_eq!(
            lines,
            &[placed(rank, true), "OK collectives right".into()],
            "rank {rank}"
        );
    }
}

#[test]
fn two_simulated_hosts_on_one_flat_tcp_level() {
    for (rank, lines) in two_hosts(false).iter().enumerate() {
        assert_eq!(
            lines,
            &[placed(rank, false), "OK collectives right".into()],
            "rank {rank}"
        );
    }
}

#[test]
fn without_host_names_the_same_ranks_are_one_host_sharing_memory() {
    for (rank, lines) in run("one host", |_| Vec::new()).iter().enumerate() {
        let want = format!("PLACED local {rank}/4 cross 0/1 shm true hierarchical false");
        assert_eq!(lines, &[want, "OK collectives right".into()], "rank {rank}");
    }
}
