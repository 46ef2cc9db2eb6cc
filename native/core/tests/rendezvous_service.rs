//! The driver's rendezvous service: ranks get every rank's entry in rank
//! order as soon as the last one registers, stage attempts are kept apart,
//! strangers and wrong secrets are refused without disturbing the ranks, and
//! every wait ends with an error naming the service. Ends with rank processes
//! that exchange their listener addresses through the service and allreduce.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::{say, say_err, Job, RankSpec};
use horovod_core::{
    connect, exchange_entries, CommConfig, Error, Listener, ReduceOp, RendezvousService,
};
use rand::seq::SliceRandom;

const SECRET: &[u8] = b"driver-secret-0123456789";
const LONG: Duration = Duration::from_secs(10);

fn start(size: usize) -> (RendezvousService, String) {
    let service = RendezvousService::start("127.0.0.1:0", SECRET, size).unwrap();
    let address = format!("127.0.0.1:{}", service.port());
    (service, address)
}

/// Registers on a thread; returns the entries and how long the call took.
fn register(
    address: &str,
    rank: usize,
    size: usize,
    attempt: u32,
    entry: &str,
    timeout: Duration,
) -> JoinHandle<(Result<Vec<String>, Error>, Duration)> {
    let (address, entry) = (address.to_string(), entry.to_string());
    thread::spawn(move || {
        let started = Instant::now();
        let result = exchange_entries(&address, SECRET, rank, size, attempt, &entry, timeout);
        (result, started.elapsed())
    })
}

fn entries(handle: JoinHandle<(Result<Vec<String>, Error>, Duration)>) -> Vec<String> {
    handle.join().unwrap().0.unwrap()
}

fn failure(handle: JoinHandle<(Result<Vec<String>, Error>, Duration)>) -> (Error, Duration) {
    let (result, took) = handle.join().unwrap();
    (result.unwrap_err(), took)
}

#[test]
fn every_rank_gets_the_entries_in_rank_order_once_the_last_registers() {
    let (_service, address) = start(3);
    let expected = ["h0:1", "!rank 1 could not listen: address in use", "h2:3"];
    let mut handles = Vec::new();
    for rank in [2, 0, 1] {
        handles.push((rank, register(&address, rank, 3, 0, expected[rank], LONG)));
        thread::sleep(Duration::from_millis(30));
    }
    for (rank, handle) in handles {
        let (result, took) = handle.join().unwrap();
        assert_eq!(result.unwrap(), expected, "rank {rank}");
        if rank == 1 {
            assert!(took < Duration::from_millis(300), "last rank took {took:?}");
        }
    }
}

#[test]
fn stage_attempts_get_their_own_lists() {
    let (_service, address) = start(2);
    let first_0 = register(&address, 0, 2, 0, "first-0", LONG);
    thread::sleep(Duration::from_millis(50));
    // A rerun of the stage completes while the first attempt still waits.
    let second_1 = register(&address, 1, 2, 1, "second-1", LONG);
    let second_0 = register(&address, 0, 2, 1, "second-0", LONG);
    assert_eq!(entries(second_0), ["second-0", "second-1"]);
    assert_eq!(entries(second_1), ["second-0", "second-1"]);
    assert!(!first_0.is_finished());
    let first_1 = register(&address, 1, 2, 0, "first-1", LONG);
    assert_eq!(entries(first_1), ["first-0", "first-1"]);
    assert_eq!(entries(first_0), ["first-0", "first-1"]);
}

#[test]
fn registering_again_replaces_the_earlier_registration() {
    let (_service, address) = start(2);
    let old = register(&address, 0, 2, 0, "old", LONG);
    thread::sleep(Duration::from_millis(50));
    let new = register(&address, 0, 2, 0, "new", LONG);
    let (err, _) = failure(old);
    assert!(matches!(err, Error::ServiceLost { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("rank 0 registered again for stage attempt 0"),
        "{err}"
    );
    let other = register(&address, 1, 2, 0, "b", LONG);
    assert_eq!(entries(new), ["new", "b"]);
    assert_eq!(entries(other), ["new", "b"]);
}

#[test]
fn wrong_secret_is_refused_fast_and_does_not_disturb_the_ranks() {
    let (_service, address) = start(2);
    let genuine_0 = register(&address, 0, 2, 0, "a:1", LONG);
    let started = Instant::now();
    let err = exchange_entries(&address, b"not-the-secret", 1, 2, 0, "evil:1", LONG).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "slow refusal"
    );
    assert!(matches!(err, Error::AuthFailed { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!(
            "the driver's rendezvous service at {address} could not prove it knows the job secret"
        )),
        "{err}"
    );
    let genuine_1 = register(&address, 1, 2, 0, "b:2", LONG);
    assert_eq!(entries(genuine_1), ["a:1", "b:2"]);
    assert_eq!(entries(genuine_0), ["a:1", "b:2"]);
}

#[test]
fn strangers_do_not_block_the_service() {
    let (_service, address) = start(2);
    let silent = TcpStream::connect(&address).unwrap();
    let mut garbage = TcpStream::connect(&address).unwrap();
    garbage.write_all(&[0xAB; 4096]).unwrap();
    let mut half_hello = TcpStream::connect(&address).unwrap();
    half_hello.write_all(b"HOROV").unwrap();
    drop(half_hello);
    drop(TcpStream::connect(&address).unwrap());
    let started = Instant::now();
    let rank_0 = register(&address, 0, 2, 0, "a:1", LONG);
    let rank_1 = register(&address, 1, 2, 0, "b:2", LONG);
    assert_eq!(entries(rank_0), ["a:1", "b:2"]);
    assert_eq!(entries(rank_1), ["a:1", "b:2"]);
    assert!(started.elapsed() < Duration::from_millis(500));
    drop((silent, garbage));
}

#[test]
fn missing_rank_times_out_naming_the_service() {
    let (_service, address) = start(2);
    let (err, took) = failure(register(
        &address,
        0,
        2,
        3,
        "a:1",
        Duration::from_millis(500),
    ));
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(1_500),
        "{took:?}"
    );
    assert!(matches!(err, Error::Timeout { rank: None, .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "timed out after 500ms waiting for the driver's rendezvous service at {address}: \
             not every rank registered for stage attempt 3"
        )
    );
}

#[test]
fn dropping_the_service_fails_waiting_ranks_fast() {
    let (service, address) = start(3);
    let waiting = register(&address, 0, 3, 0, "a:1", LONG);
    // A connection still in its handshake is closed too.
    let mut silent = TcpStream::connect(&address).unwrap();
    silent.set_read_timeout(Some(LONG)).unwrap();
    thread::sleep(Duration::from_millis(100));
    let dropped = Instant::now();
    drop(service);
    assert!(dropped.elapsed() < Duration::from_millis(100), "slow drop");
    let (err, _) = failure(waiting);
    assert_eq!(silent.read(&mut [0u8; 64]).unwrap(), 0);
    assert!(
        dropped.elapsed() < Duration::from_millis(300),
        "slow failure"
    );
    assert!(matches!(err, Error::ServiceLost { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "connection to the driver's rendezvous service at {address} lost while waiting for \
             the other ranks to register: the service closed the connection (did the driver \
             stop the job?)"
        )
    );
    // The port is closed: a later rank cannot reach it.
    let (err, _) = failure(register(
        &address,
        1,
        3,
        0,
        "b:2",
        Duration::from_millis(200),
    ));
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("trying to reach"), "{err}");
}

#[test]
fn ranks_started_before_the_service_reach_it() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let early = register(&address, 0, 1, 0, "a:1", LONG);
    thread::sleep(Duration::from_millis(150));
    let _service = RendezvousService::start(&address, SECRET, 1).unwrap();
    assert_eq!(entries(early), ["a:1"]);
}

#[test]
fn of_several_candidates_the_ranks_find_the_one_the_service_listens_at() {
    // A rank that hosts the service binds the first of the job's candidate
    // ports it can: the earlier ones are anyone's. Here one is another
    // protocol's (it answers garbage), one another job's service (another
    // secret), one silent, and one nobody's; the service starts last.
    let free = |_| {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let garbage = TcpListener::bind("127.0.0.1:0").unwrap();
    let garbage_port = garbage.local_addr().unwrap().port();
    thread::spawn(move || {
        for stream in garbage.incoming() {
            let _ = stream.unwrap().write_all(&[0xAB; 64]);
        }
    });
    let other_job =
        RendezvousService::start("127.0.0.1:0", b"another-jobs-secret-0123", 2).unwrap();
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let (nobody, ours) = (free(0), free(1));
    let candidates = [
        garbage_port,
        other_job.port(),
        silent.local_addr().unwrap().port(),
        nobody,
        ours,
    ]
    .map(|port| format!("127.0.0.1:{port}"))
    .join(",");
    let rank_1 = register(&candidates, 1, 2, 0, "b:2", LONG);
    thread::sleep(Duration::from_millis(150));
    let _service = RendezvousService::start(&format!("127.0.0.1:{ours}"), SECRET, 2).unwrap();
    let rank_0 = register(&format!("127.0.0.1:{ours}"), 0, 2, 0, "a:1", LONG);
    assert_eq!(entries(rank_0), ["a:1", "b:2"]);
    assert_eq!(entries(rank_1), ["a:1", "b:2"]);

    // With no candidate answering as the service, the error names each.
    let err = exchange_entries(
        &format!("127.0.0.1:{garbage_port},127.0.0.1:{}", other_job.port()),
        SECRET,
        1,
        2,
        0,
        "b:2",
        LONG,
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("none of the candidate addresses")
            && text.contains(&garbage_port.to_string()),
        "{text}"
    );
    drop(silent);
}

#[test]
fn other_job_size_is_refused() {
    let (_service, address) = start(2);
    let err = exchange_entries(&address, SECRET, 2, 3, 0, "c:3", LONG).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "invalid argument: the driver's rendezvous service at {address} refused the \
             registration of rank 2: rank 2 was given 3 ranks, the service's job has 2"
        )
    );
}

#[test]
fn service_and_listener_addresses_cannot_be_mixed_up() {
    // A rank's listener given as the service.
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let listener_at = format!("127.0.0.1:{}", listener.port());
    let addresses = vec![listener_at.clone(), "127.0.0.1:9".to_string()];
    let config = CommConfig {
        connect_timeout: Duration::from_millis(500),
        io_timeout: LONG,
        ..CommConfig::default()
    };
    let mesh = thread::spawn(move || connect(listener, 0, &addresses, SECRET, &config));
    let err = exchange_entries(&listener_at, SECRET, 0, 2, 0, "a:1", LONG).unwrap_err();
    assert!(matches!(err, Error::VersionMismatch { .. }), "{err}");
    assert!(
        err.to_string().contains(
            "it is a rank of the mesh, not the driver's rendezvous service (is the address right?)"
        ),
        "{err}"
    );
    let err = mesh.join().unwrap().unwrap_err();
    assert!(
        err.to_string().contains(
            "it is a rank registering with the rendezvous service, not a rank of the mesh"
        ),
        "{err}"
    );

    // The service given as a rank's listener.
    let (_service, address) = start(2);
    let listener = Listener::bind("127.0.0.1:0").unwrap();
    let own = format!("127.0.0.1:{}", listener.port());
    let err = connect(
        listener,
        1,
        &[address.clone(), own],
        SECRET,
        &CommConfig::default(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::VersionMismatch { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "protocol mismatch with rank 0 at {address}: it is the driver's rendezvous service, \
             not a rank of the mesh (is the address right?)"
        )
    );
}

#[test]
fn other_protocol_version_is_named() {
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = fake.local_addr().unwrap().to_string();
    let server = thread::spawn(move || {
        let (mut stream, _) = fake.accept().unwrap();
        let mut hello = [0u8; 52];
        stream.read_exact(&mut hello).unwrap();
        hello[8..10].copy_from_slice(&99u16.to_le_bytes());
        stream.write_all(&hello).unwrap();
    });
    let err = exchange_entries(&address, SECRET, 0, 1, 0, "a:1", LONG).unwrap_err();
    server.join().unwrap();
    assert!(matches!(err, Error::VersionMismatch { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("speaks protocol version 99, this library speaks "),
        "{err}"
    );
}

// ------------------------------------------------------------ rank processes

/// Entry point of the rank processes; a no-op in the parent.
#[test]
fn child_entry() {
    let Some(rank) = common::child_rank() else {
        return;
    };
    assert_eq!(common::scenario(), "service");
    let size: usize = common::var("HVD_TEST_SIZE").unwrap().parse().unwrap();
    let listener = Listener::bind("127.0.0.1:0").expect("bind");
    let own = format!("127.0.0.1:{}", listener.port());
    say(format!("PORT {}", listener.port()));
    // The parent sends the service's address when it is this rank's turn.
    let mut service = String::new();
    std::io::stdin().read_line(&mut service).expect("read");
    let secret = common::secret();
    let started = Instant::now();
    let addresses =
        match exchange_entries(service.trim(), secret.as_bytes(), rank, size, 0, &own, LONG) {
            Ok(addresses) => addresses,
            Err(e) => return say_err(&e),
        };
    say(format!(
        "ENTRIES {} {}",
        started.elapsed().as_millis(),
        addresses.join(",")
    ));
    let mut comm = match connect(
        listener,
        rank,
        &addresses,
        secret.as_bytes(),
        &common::config(),
    ) {
        Ok(comm) => comm,
        Err(e) => return say_err(&e),
    };
    let mut data = vec![rank as f32 + 1.0; 1000];
    match comm.allreduce(&mut data, ReduceOp::Sum) {
        Ok(()) => {
            let n = size as f32;
            assert_eq!(data, vec![n * (n + 1.0) / 2.0; 1000]);
            say("OK");
        }
        Err(e) => say_err(&e),
    }
}

#[test]
fn rank_processes_exchange_listener_addresses_through_the_service() {
    let service = RendezvousService::start("127.0.0.1:0", common::SECRET.as_bytes(), 3).unwrap();
    let address = format!("127.0.0.1:{}", service.port());
    let spec = RankSpec::default().with("HVD_TEST_SIZE", 3);
    let mut job = Job::start("service", vec![spec; 3]);
    let mut order = vec![0, 1, 2];
    order.shuffle(&mut rand::thread_rng());
    for &rank in &order {
        job.send_addresses(rank, std::slice::from_ref(&address));
        thread::sleep(Duration::from_millis(20));
    }
    let listeners = job.addresses().join(",");
    let outputs = job.finish(Duration::from_secs(20));
    for (rank, lines) in outputs.iter().enumerate() {
        assert_eq!(lines.len(), 2, "rank {rank}: {lines:?}");
        let (ms, entries) = lines[0]
            .strip_prefix("ENTRIES ")
            .and_then(|rest| rest.split_once(' '))
            .unwrap_or_else(|| panic!("rank {rank}: {lines:?}"));
        assert_eq!(entries, listeners, "rank {rank}");
        assert_eq!(lines[1], "OK", "rank {rank}");
        // The last rank to register is answered at once.
        let ms: u64 = ms.parse().unwrap();
        if rank == order[2] {
            assert!(ms < 500, "the last rank waited {ms} ms for the entries");
        }
    }
}
