//! Ranks joining a job through one `RankSpec`: through the driver's
//! rendezvous service, or with addresses exchanged by the caller.

use std::thread;
use std::time::Duration;

use horovod_core::launch::{join, join_json, Joined, RankSpec};
use horovod_core::{exchange_entries, DataType, Listener, Operation, RendezvousService, Request};

const SECRET: &[u8] = b"launch test secret";
const WAIT: Duration = Duration::from_secs(60);

fn no_variables(_: &str) -> Option<String> {
    None
}

fn spec(json: &str) -> RankSpec {
    RankSpec::from_json(json, no_variables).unwrap()
}

/// Allreduces `rank + 1` on every rank's engine; returns what each got.
fn sum_of_ranks(ranks: Vec<Joined>) -> Vec<f64> {
    let handles: Vec<_> = ranks
        .iter()
        .enumerate()
        .map(|(rank, joined)| {
            let value = (rank + 1) as f64;
            joined
                .engine
                .submit(Request {
                    name: "sum".into(),
                    operation: Operation::allreduce(horovod_core::ReduceOp::Sum),
                    dtype: DataType::F64,
                    shape: vec![1],
                    data: value.to_ne_bytes().to_vec().into(),
                })
                .unwrap()
        })
        .collect();
    handles
        .into_iter()
        .map(|mut handle| {
            let output = handle.wait(WAIT).unwrap();
            output.to_elements::<f64>().unwrap()[0]
        })
        .collect()
}

#[test]
fn ranks_join_through_the_drivers_service() {
    let service = RendezvousService::start("127.0.0.1:0", SECRET, 3).unwrap();
    let address = format!("127.0.0.1:{}", service.port());
    let joined: Vec<Joined> = (0..3)
        .map(|rank| {
            let json = format!(
                r#"{{"rank": {rank}, "size": 3, "connect_timeout_ms": 30000,
                     "rendezvous": {{"service": {{"address": "{address}", "host": "127.0.0.1"}}}}}}"#
            );
            thread::spawn(move || join(&spec(&json), SECRET, None))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    for (rank, rank_joined) in joined.iter().enumerate() {
        let placement = rank_joined.placement;
        assert_eq!(
            (
                placement.local_rank,
                placement.local_size,
                placement.cross_rank,
                placement.cross_size
            ),
            (rank, 3, 0, 1)
        );
    }
    assert_eq!(sum_of_ranks(joined), [6.0, 6.0, 6.0]);
}

#[test]
fn ranks_join_on_addresses_they_exchanged() {
    let listeners: Vec<Listener> = (0..2)
        .map(|_| Listener::bind("127.0.0.1:0").unwrap())
        .collect();
    let entries: Vec<String> = listeners
        .iter()
        .map(|l| format!("\"127.0.0.1:{}\"", l.port()))
        .collect();
    let entries = entries.join(",");
    let joined: Vec<Joined> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, listener)| {
            let json = format!(
                r#"{{"rank": {rank}, "size": 2, "rendezvous": {{"entries": [{entries}]}}}}"#
            );
            thread::spawn(move || join(&spec(&json), SECRET, Some(listener)))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    assert_eq!(sum_of_ranks(joined), [3.0, 3.0]);
}

#[test]
fn addresses_without_this_ranks_listener_are_refused() {
    let json = r#"{"rank": 0, "size": 1, "rendezvous": {"entries": ["127.0.0.1:9"]}}"#;
    let error = join(&spec(json), SECRET, None).err().unwrap().to_string();
    assert!(error.contains("must pass the listener"), "{error}");
}

#[test]
fn a_rank_that_could_not_listen_is_named_by_the_others() {
    let service = RendezvousService::start("127.0.0.1:0", SECRET, 2).unwrap();
    let address = format!("127.0.0.1:{}", service.port());
    let failing = {
        let address = address.clone();
        // Rank 1 takes part in the exchange with its error instead of an address.
        thread::spawn(move || {
            exchange_entries(&address, SECRET, 1, 2, 0, "!address already in use", WAIT)
        })
    };
    let json = format!(
        r#"{{"rank": 0, "size": 2, "rendezvous": {{"service": {{"address": "{address}", "host": "127.0.0.1"}}}}}}"#
    );
    let error = join(&spec(&json), SECRET, None).err().unwrap().to_string();
    assert!(
        error.contains("rank 1 could not join: address already in use"),
        "{error}"
    );
    failing.join().unwrap().unwrap();
}

#[test]
fn a_rank_with_a_bad_variable_is_named_by_the_others_at_once() {
    let service = RendezvousService::start("127.0.0.1:0", SECRET, 2).unwrap();
    let address = format!("127.0.0.1:{}", service.port());
    let json = |rank: usize| {
        format!(
            r#"{{"rank": {rank}, "size": 2,
                 "rendezvous": {{"service": {{"address": "{address}", "host": "127.0.0.1"}}}}}}"#
        )
    };
    let bad = {
        let json = json(1);
        thread::spawn(move || {
            let tls = |name: &str| (name == "HOROVOD_RS_TLS").then(|| "sometimes".to_string());
            join_json(&json, tls, SECRET, None)
                .err()
                .unwrap()
                .to_string()
        })
    };
    let error = join_json(&json(0), no_variables, SECRET, None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("rank 1 could not join") && error.contains("HOROVOD_RS_TLS=\"sometimes\""),
        "{error}"
    );
    assert!(bad.join().unwrap().contains("HOROVOD_RS_TLS"));
}
