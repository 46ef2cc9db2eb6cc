//! Ranks that disagree about a collective fail on every rank, quickly,
//! naming a rank that disagrees; bad arguments fail on the rank that passed
//! them and its peers see it go. Three ranks on threads of this process, a
//! fresh mesh per case, since any failure closes the communicator.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use horovod_core::{
    connect, AllreduceOptions, CommConfig, Communicator, Error, Listener, ReduceOp,
};

const SIZE: usize = 3;

/// Runs `body` on each rank of a fresh 3-rank mesh and returns each rank's
/// result, in rank order.
fn on_mesh(body: fn(usize, &mut Communicator) -> Result<(), Error>) -> Vec<Result<(), Error>> {
    // Reserve the ports first so every rank knows every address.
    let listeners: Vec<Listener> = (0..SIZE)
        .map(|_| Listener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let addresses: Vec<String> = listeners
        .iter()
        .map(|l| format!("127.0.0.1:{}", l.port()))
        .collect();
    let config = CommConfig {
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(20),
        ..CommConfig::default()
    };
    let (tx, rx) = mpsc::channel();
    for (rank, listener) in listeners.into_iter().enumerate() {
        let (addresses, config, tx) = (addresses.clone(), config.clone(), tx.clone());
        thread::spawn(move || {
            let result = connect(listener, rank, &addresses, b"secret", &config)
                .and_then(|mut comm| body(rank, &mut comm));
            let _ = tx.send((rank, result));
        });
    }
    drop(tx);
    let mut results: Vec<Option<Result<(), Error>>> = (0..SIZE).map(|_| None).collect();
    for _ in 0..SIZE {
        let (rank, result) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("every rank finishes well before the I/O timeout");
        results[rank] = Some(result);
    }
    results
        .into_iter()
        .map(|r| r.expect("one result per rank"))
        .collect()
}

/// Requires every rank to fail with `Mismatch` naming `expected[rank]`, the
/// message containing `needle`.
fn assert_mismatch(results: &[Result<(), Error>], expected: [usize; SIZE], needle: &str) {
    for (rank, result) in results.iter().enumerate() {
        match result {
            Err(Error::Mismatch {
                rank: other,
                detail,
            }) => {
                assert_eq!(*other, expected[rank], "rank {rank}: {detail}");
                assert!(detail.contains(needle), "rank {rank}: {detail}");
            }
            other => panic!("rank {rank}: expected a mismatch, got {other:?}"),
        }
    }
}

#[test]
fn mismatched_allgather_types_fail_on_every_rank() {
    let started = Instant::now();
    let results = on_mesh(|rank, comm| {
        if rank == 2 {
            comm.allgather(&[1.0f64; 3]).map(drop)
        } else {
            comm.allgather(&[1.0f32; 3]).map(drop)
        }
    });
    // Ranks 0 and 1 name rank 2; rank 2 names the lowest rank, 0.
    assert_mismatch(&results, [2, 2, 0], "allgather of f");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn mismatched_broadcast_lengths_and_roots_fail_on_every_rank() {
    let results =
        on_mesh(|rank, comm| comm.broadcast(&mut vec![0i32; 4 + usize::from(rank == 1)], 0));
    assert_mismatch(&results, [1, 0, 1], "broadcast of");
    let results = on_mesh(|rank, comm| comm.broadcast(&mut [0u8; 4], usize::from(rank == 0)));
    assert_mismatch(&results, [1, 0, 0], "from rank");
}

#[test]
fn mismatched_reducescatter_ops_and_collectives_fail_on_every_rank() {
    let results = on_mesh(|rank, comm| {
        let op = if rank == 1 {
            ReduceOp::Max
        } else {
            ReduceOp::Sum
        };
        comm.reducescatter(&[1i64; 6], op).map(drop)
    });
    assert_mismatch(&results, [1, 0, 1], "reducescatter of 6 i64");
    let results = on_mesh(|rank, comm| {
        if rank == 0 {
            comm.alltoall(&[1.0f32; 3], &[1, 1, 1]).map(drop)
        } else {
            comm.allgather(&[1.0f32; 3]).map(drop)
        }
    });
    assert_mismatch(&results, [1, 0, 0], "it called");
}

#[test]
fn mismatched_groupings_fail_on_every_rank() {
    let results = on_mesh(|rank, comm| {
        let mut data = [1.0f32; 6];
        let (a, b) = data.split_at_mut(2 + rank.min(1));
        comm.grouped_allreduce(&mut [a, b], ReduceOp::Sum)?;
        // Same total, different number of tensors on rank 2.
        let mut whole = [1.0f32; 6];
        if rank == 2 {
            comm.grouped_allreduce(&mut [&mut whole[..]], ReduceOp::Sum)
        } else {
            let (a, b) = whole.split_at_mut(3);
            comm.grouped_allreduce(&mut [a, b], ReduceOp::Sum)
        }
    });
    assert_mismatch(&results, [2, 2, 0], "grouped allreduce of");
}

#[test]
fn bad_arguments_fail_where_they_are_given_and_peers_see_it() {
    let results = on_mesh(|rank, comm| {
        let options = AllreduceOptions::new(ReduceOp::Sum).with_prescale(if rank == 0 {
            f64::NAN
        } else {
            1.0
        });
        comm.allreduce_with(&mut [1i32; 4], options)
    });
    match &results[0] {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains("must be finite"), "{message}")
        }
        other => panic!("rank 0: {other:?}"),
    }
    for (rank, result) in results.iter().enumerate().skip(1) {
        assert!(
            matches!(result, Err(e) if e.is_peer_lost()),
            "rank {rank}: {result:?}"
        );
    }
    let results = on_mesh(|rank, comm| {
        let splits: &[usize] = if rank == 1 { &[1, 1] } else { &[1, 1, 1] };
        comm.alltoall(&[0u8; 3], splits).map(drop)
    });
    assert!(
        matches!(&results[1], Err(Error::InvalidArgument(m)) if m.contains("2 splits for 3 ranks")),
        "{:?}",
        results[1]
    );
    let results = on_mesh(|_, comm| comm.alltoall(&[0u8; 3], &[1, 1, 2]).map(drop));
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(Error::InvalidArgument(m)) if m.contains("do not add up"))),
        "{results:?}"
    );
    let results = on_mesh(|_, comm| comm.broadcast(&mut [0u8; 1], 3));
    assert!(results
        .iter()
        .all(|r| matches!(r, Err(Error::InvalidArgument(m)) if m.contains("root 3"))));
}
