//! The engine end to end on threads of one process (`LocalTransport`):
//! every collective it executes, fused and unfused, and the errors that need
//! other ranks (mismatch, stall, duplicate name, shutdown).

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use horovod_core::engine::{LocalTransport, Stopped};
use horovod_core::nccl::{DevicePtr, StreamHandle};
use horovod_core::{
    DataType, Engine, EngineConfig, Error, Handle, Operation, Output, Payload, ReduceOp, Request,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

const WAIT: Duration = Duration::from_secs(20);

fn f64s(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn to_f64s(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn request(name: &str, operation: Operation, values: &[f64]) -> Request {
    Request {
        name: name.into(),
        operation,
        dtype: DataType::F64,
        shape: vec![values.len()],
        data: f64s(values).into(),
    }
}

/// Runs `body(rank, engine)` on `size` threads, each with its own engine.
fn run<R: Send + 'static>(
    size: usize,
    config: EngineConfig,
    body: impl Fn(usize, &Engine) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    let threads: Vec<_> = LocalTransport::group(size, WAIT)
        .into_iter()
        .enumerate()
        .map(|(rank, transport)| {
            let config = config.clone();
            let body = body.clone();
            thread::spawn(move || {
                let engine = Engine::start(transport, config).expect("start");
                body(rank, &engine)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn wait_all(handles: Vec<Handle>) -> Vec<Result<Output, Error>> {
    handles.into_iter().map(|mut h| h.wait(WAIT)).collect()
}

#[test]
fn an_engine_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Engine>();
    shareable::<Handle>();
}

#[test]
fn random_submission_orders_complete_with_correct_sums() {
    let size = 4;
    let results = run(size, EngineConfig::default(), move |rank, engine| {
        let mut order: Vec<usize> = (0..50).collect();
        order.shuffle(&mut StdRng::seed_from_u64(rank as u64));
        let mut handles: Vec<(usize, Handle)> = order
            .into_iter()
            .map(|i| {
                let values: Vec<f64> = (0..i + 1).map(|j| (rank * 100 + i + j) as f64).collect();
                let op = Operation::allreduce(ReduceOp::Sum);
                (
                    i,
                    engine
                        .submit(request(&format!("grad{i}"), op, &values))
                        .unwrap(),
                )
            })
            .collect();
        handles.sort_by_key(|(i, _)| *i);
        handles
            .into_iter()
            .map(|(_, mut h)| to_f64s(&h.wait(WAIT).unwrap().data))
            .collect::<Vec<_>>()
    });
    for outputs in results {
        for (i, got) in outputs.iter().enumerate() {
            let want: Vec<f64> = (0..i + 1)
                .map(|j| (0..size).map(|r| (r * 100 + i + j) as f64).sum())
                .collect();
            assert_eq!(*got, want, "grad{i}");
        }
    }
}

#[test]
fn every_collective_and_scaling_runs_through_the_engine() {
    let results = run(3, EngineConfig::default(), |rank, engine| {
        let r = rank as f64;
        let scaled = Operation::Allreduce {
            op: ReduceOp::Average,
            prescale: 2.0,
            postscale: 0.5,
        };
        let gathered = Request {
            name: "gather".into(),
            operation: Operation::Allgather,
            dtype: DataType::F64,
            shape: vec![rank + 1, 1],
            data: f64s(&vec![r; rank + 1]).into(),
        };
        let handles = vec![
            engine
                .submit(request(
                    "max",
                    Operation::allreduce(ReduceOp::Max),
                    &[r, -r],
                ))
                .unwrap(),
            engine.submit(request("scaled", scaled, &[r, 3.0])).unwrap(),
            engine
                .submit(request("bcast", Operation::Broadcast { root: 2 }, &[r; 2]))
                .unwrap(),
            engine.submit(gathered).unwrap(),
            engine
                .submit(Request {
                    name: "barrier".into(),
                    operation: Operation::Barrier,
                    dtype: DataType::U8,
                    shape: vec![0],
                    data: Default::default(),
                })
                .unwrap(),
            engine
                .submit(Request {
                    name: "scatter".into(),
                    operation: Operation::Reducescatter { op: ReduceOp::Sum },
                    dtype: DataType::F64,
                    shape: vec![3],
                    data: f64s(&[1.0, 2.0, 3.0]).into(),
                })
                .unwrap(),
        ];
        wait_all(handles)
    });
    for outputs in results {
        let data = |i: usize| to_f64s(&outputs[i].as_ref().unwrap().data);
        assert_eq!(data(0), [2.0, 0.0]);
        // ((0 + 1 + 2) * 2 / 3) * 0.5 and (3 * 2 * 3 / 3) * 0.5
        assert_eq!(data(1), [1.0, 3.0]);
        assert_eq!(data(2), [2.0, 2.0]);
        assert_eq!(data(3), [0.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
        assert_eq!(outputs[3].as_ref().unwrap().shape, [6, 1]);
        assert!(outputs[4].is_ok());
        let err = outputs[5].as_ref().unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    }
}

/// Lent memory: a big tensor (run alone) and two small ones (fused) are
/// reduced in the lenders' buffers, which come back in the outputs.
#[test]
fn lent_tensors_are_reduced_in_the_callers_memory() {
    let results = run(3, EngineConfig::default(), |rank, engine| {
        let lengths = [1 << 18, 3, 5]; // 2 MiB of f64, then two small ones
        let mut buffers: Vec<Vec<u8>> = lengths
            .iter()
            .map(|&n| f64s(&vec![rank as f64 + 1.0; n]))
            .collect();
        let handles: Vec<Handle> = buffers
            .iter_mut()
            .zip(lengths)
            .enumerate()
            .map(|(i, (buffer, n))| {
                // SAFETY: `buffer` lives until the end of the closure and is
                // read only after its handle has been waited on.
                let data =
                    unsafe { Payload::lent(buffer.as_mut_ptr(), buffer.len(), Box::new(())) };
                let request = Request {
                    name: format!("lent{i}"),
                    operation: Operation::allreduce(ReduceOp::Sum),
                    dtype: DataType::F64,
                    shape: vec![n],
                    data,
                };
                engine.submit(request).unwrap()
            })
            .collect();
        for (output, buffer) in wait_all(handles).into_iter().zip(&buffers) {
            let output = output.unwrap();
            assert!(output.data.is_lent());
            assert_eq!(output.data.as_ptr(), buffer.as_ptr());
        }
        buffers.iter().map(|b| to_f64s(b)).collect::<Vec<_>>()
    });
    for buffers in results {
        for values in buffers {
            assert!(values.iter().all(|&v| v == 6.0));
        }
    }
}

#[test]
fn mismatched_shapes_fail_on_every_rank_and_the_engine_carries_on() {
    let results = run(3, EngineConfig::default(), |rank, engine| {
        let values = vec![1.0; if rank == 1 { 3 } else { 2 }];
        let sum = Operation::allreduce(ReduceOp::Sum);
        let bad = engine.submit(request("w", sum.clone(), &values)).unwrap();
        let good = engine.submit(request("b", sum, &[1.0])).unwrap();
        wait_all(vec![bad, good])
    });
    for outputs in results {
        let err = outputs[0].as_ref().unwrap_err();
        assert_eq!(
            err.to_string(),
            "tensor 'w' was submitted differently across ranks: \
             shape differs: [2] on ranks [0, 2]; [3] on ranks [1]"
        );
        assert_eq!(to_f64s(&outputs[1].as_ref().unwrap().data), [3.0]);
    }
}

#[test]
fn a_tensor_missing_on_some_ranks_fails_with_a_stall_error() {
    let config = EngineConfig {
        stall_warning: Duration::from_millis(100),
        stall_timeout: Duration::from_millis(300),
        ..EngineConfig::default()
    };
    let results = run(3, config, |rank, engine| {
        let sum = Operation::allreduce(ReduceOp::Sum);
        let mut handles = vec![engine.submit(request("all", sum.clone(), &[1.0])).unwrap()];
        if rank != 2 {
            handles.push(engine.submit(request("some", sum, &[1.0])).unwrap());
        }
        let outputs = wait_all(handles);
        if rank == 2 {
            // Keep this engine running until the others have their errors.
            thread::sleep(Duration::from_millis(1000));
        }
        outputs
    });
    for (rank, outputs) in results.iter().enumerate() {
        assert_eq!(to_f64s(&outputs[0].as_ref().unwrap().data), [3.0]);
        if rank != 2 {
            let err = outputs[1].as_ref().unwrap_err();
            assert!(matches!(err, Error::Stalled { missing, .. } if missing == &[2]));
        }
    }
}

#[test]
fn duplicate_names_and_shutdown_are_errors_not_hangs() {
    // Rank 1 submits "x" only after rank 0 saw its duplicate rejected, so
    // rank 0's first "x" is certainly still in flight then.
    let rejected = Arc::new(Barrier::new(2));
    let results = run(2, EngineConfig::default(), move |rank, engine| {
        let sum = Operation::allreduce(ReduceOp::Sum);
        let mut duplicate = None;
        if rank == 1 {
            rejected.wait();
        }
        let first = engine.submit(request("x", sum.clone(), &[1.0])).unwrap();
        if rank == 0 {
            // Refused at once, as Horovod does, not through the handle.
            let second = engine.submit(request("x", sum.clone(), &[1.0]));
            duplicate = Some(second.unwrap_err().to_string());
            rejected.wait();
        }
        let mut done = wait_all(vec![first]);
        // Completed, the name is free again.
        done.extend(wait_all(vec![engine
            .submit(request("x", sum.clone(), &[1.0]))
            .unwrap()]));
        let bad = engine.submit(request("", sum, &[1.0])).unwrap_err();
        (duplicate, done, bad.to_string())
    });
    for (rank, (duplicate, done, bad)) in results.into_iter().enumerate() {
        if rank == 0 {
            assert_eq!(
                duplicate.as_deref(),
                Some("tensor 'x' is already in flight on this rank")
            );
        }
        assert_eq!(to_f64s(&done[0].as_ref().unwrap().data), [2.0]);
        assert_eq!(to_f64s(&done[1].as_ref().unwrap().data), [2.0]);
        assert_eq!(bad, "invalid argument: tensor name is empty");
    }

    // Rank 1 shuts down; rank 0's tensor fails instead of waiting forever.
    let mut group = LocalTransport::group(2, WAIT);
    let transport_one = group.pop().unwrap();
    let zero = thread::spawn(move || {
        let engine = Engine::start(group.pop().unwrap(), EngineConfig::default()).unwrap();
        let sum = Operation::allreduce(ReduceOp::Sum);
        let mut handle = engine
            .submit(request("never", sum.clone(), &[1.0]))
            .unwrap();
        let err = handle.wait(WAIT).unwrap_err();
        let later = engine.submit(request("later", sum, &[1.0])).unwrap_err();
        (err, later)
    });
    let one = Engine::start(transport_one, EngineConfig::default()).unwrap();
    thread::sleep(Duration::from_millis(50));
    drop(one);
    let (err, later) = zero.join().unwrap();
    assert!(matches!(err, Error::EngineStopped { .. }), "{err}");
    assert!(matches!(later, Error::EngineStopped { .. }), "{later}");
    // Dropped without a word, rank 1 still says it left.
    assert_eq!(
        later.to_string(),
        "the engine has stopped: rank 1 left the job (shut down)"
    );
}

#[test]
fn a_rank_that_leaves_tells_the_others_why() {
    let mut group = LocalTransport::group(3, WAIT);
    let transport_two = group.pop().unwrap();
    let transport_one = group.pop().unwrap();
    let zero = thread::spawn(move || {
        let engine = Engine::start(group.pop().unwrap(), EngineConfig::default()).unwrap();
        let mut handle = engine
            .submit(request(
                "pending",
                Operation::allreduce(ReduceOp::Sum),
                &[1.0],
            ))
            .unwrap();
        (handle.wait(WAIT).unwrap_err(), engine.stopped())
    });
    let two = thread::spawn(move || {
        let engine = Engine::start(transport_two, EngineConfig::default()).unwrap();
        while engine.stopped().is_none() {
            thread::sleep(Duration::from_millis(5));
        }
        engine.stopped()
    });
    let mut one = Engine::start(transport_one, EngineConfig::default()).unwrap();
    one.leave("its function returned");
    let (error, stopped_zero) = zero.join().unwrap();
    let stopped_two = two.join().unwrap();
    let expected = Stopped {
        cause: "rank 1 left the job (its function returned)".into(),
        departures: vec![(1, "its function returned".into())],
    };
    assert_eq!(
        error.to_string(),
        "the engine has stopped: rank 1 left the job (its function returned)"
    );
    assert_eq!(stopped_zero, Some(expected.clone()));
    assert_eq!(stopped_two, Some(expected.clone()));
    assert_eq!(one.stopped(), Some(expected));
}

fn join_request() -> Request {
    Request {
        name: "join".into(),
        operation: Operation::Join,
        dtype: DataType::I32,
        shape: Vec::new(),
        data: 0i32.to_ne_bytes().to_vec().into(),
    }
}

fn joined_last(output: &Output) -> i32 {
    i32::from_ne_bytes(output.data[..4].try_into().unwrap())
}

/// Horovod's uneven data: rank `r` runs `r + 1` steps, then joins; the ranks
/// still running get sums to which the joined ranks contribute zeros, and
/// every join answers the last rank.
#[test]
fn joined_ranks_stand_in_with_zeros_until_every_rank_joins() {
    let size = 3;
    let results = run(size, EngineConfig::default(), move |rank, engine| {
        let mut sums = Vec::new();
        for step in 0..=rank {
            let name = format!("grad.{step}");
            let value = (rank + 1) as f64;
            let mut h = engine
                .submit(request(
                    &name,
                    Operation::allreduce(ReduceOp::Sum),
                    &[value, 1.0],
                ))
                .unwrap();
            sums.push(to_f64s(&h.wait(WAIT).unwrap().data));
        }
        let last = joined_last(&engine.submit(join_request()).unwrap().wait(WAIT).unwrap());
        (sums, last)
    });
    for (rank, (sums, last)) in results.into_iter().enumerate() {
        assert_eq!(last, 2, "rank {rank}");
        for (step, sum) in sums.iter().enumerate() {
            // Ranks step..size took part in step `step`; values are rank + 1.
            let expected: f64 = (step..size).map(|r| (r + 1) as f64).sum();
            assert_eq!(
                sum,
                &vec![expected, (size - step) as f64],
                "rank {rank} step {step}"
            );
        }
    }
}

/// Rank 0 joins while rank 1 submits `submission()` and then joins: rank
/// 1's error for it (rank 0's join must report rank 1 as the last).
fn error_while_rank_0_has_joined(submission: fn() -> Request) -> String {
    let results = run(2, EngineConfig::default(), move |rank, engine| {
        if rank == 0 {
            return engine
                .submit(join_request())
                .unwrap()
                .wait(WAIT)
                .map(|o| joined_last(&o).to_string());
        }
        let outcome = engine
            .submit(submission())
            .unwrap()
            .wait(WAIT)
            .map(|_| "completed".to_string());
        engine.submit(join_request()).unwrap().wait(WAIT).unwrap();
        outcome
    });
    assert_eq!(results[0].as_ref().unwrap(), "1");
    results[1].as_ref().unwrap_err().to_string()
}

/// As in Horovod, only allreduces run while a rank has joined: a broadcast
/// fails even from a root that has not joined, and so does an allgather.
#[test]
fn broadcast_and_allgather_fail_while_a_rank_has_joined_naming_it() {
    let error = error_while_rank_0_has_joined(|| {
        request("weights", Operation::Broadcast { root: 1 }, &[1.0])
    });
    assert!(
        error.contains("Broadcast is not supported with Join") && error.contains("[0]"),
        "{error}"
    );
    let error = error_while_rank_0_has_joined(|| Request {
        name: "rows".into(),
        operation: Operation::Allgather,
        dtype: DataType::F64,
        shape: vec![1],
        data: f64s(&[1.0]).into(),
    });
    assert!(
        error.contains("Allgather is not supported with Join") && error.contains("[0]"),
        "{error}"
    );
}

#[test]
fn a_gpu_tensor_fails_while_a_rank_has_joined() {
    let error = error_while_rank_0_has_joined(|| {
        // SAFETY: never dereferenced: the coordinator fails the tensor
        // before any rank executes it.
        let data =
            unsafe { Payload::device(DevicePtr(0x1000), 8, 0, StreamHandle(0), Box::new(())) };
        Request {
            name: "gpu.grad".into(),
            operation: Operation::allreduce(ReduceOp::Sum),
            dtype: DataType::F64,
            shape: vec![1],
            data,
        }
    });
    assert!(
        error.contains("a GPU tensor's allreduce cannot run while ranks [0] have joined"),
        "{error}"
    );
}

/// An idle engine starts a cycle as soon as a tensor arrives: 20 synchronous
/// allreduces with a 50 ms cycle time take far less than 20 cycle times.
#[test]
fn idle_engines_do_not_wait_out_the_cycle_time() {
    let config = EngineConfig {
        cycle_time: Duration::from_millis(50),
        ..EngineConfig::default()
    };
    let elapsed = run(2, config, |rank, engine| {
        let started = std::time::Instant::now();
        for i in 0..20 {
            let sum = Operation::allreduce(ReduceOp::Sum);
            let handle = engine
                .submit(request(&format!("sync.{i}"), sum, &[rank as f64]))
                .unwrap();
            let output = wait_all(vec![handle]).pop().unwrap().unwrap();
            assert_eq!(to_f64s(&output.data), vec![1.0]);
        }
        started.elapsed()
    });
    for took in elapsed {
        assert!(
            took < Duration::from_millis(500),
            "20 allreduces took {took:?}"
        );
    }
}

/// A held group joins one cycle on every rank: rank 1 submits its group's
/// second tensor 100 ms after the first, and under the hold its engine waits
/// for it instead of negotiating the first alone, which would leave rank 0's
/// second waiting out the (minute-long) cycle time.
#[test]
fn a_held_group_is_negotiated_in_one_cycle() {
    let config = EngineConfig {
        cycle_time: Duration::from_secs(60),
        ..EngineConfig::default()
    };
    run(2, config, |rank, engine| {
        let sum = || Operation::allreduce(ReduceOp::Sum);
        engine.hold();
        let first = engine.submit(request("group.0", sum(), &[1.0])).unwrap();
        if rank == 1 {
            thread::sleep(Duration::from_millis(100));
        }
        let second = engine.submit(request("group.1", sum(), &[2.0])).unwrap();
        engine.release();
        let sums: Vec<Vec<f64>> = wait_all(vec![first, second])
            .into_iter()
            .map(|output| to_f64s(&output.expect("the group's allreduce").data))
            .collect();
        assert_eq!(sums, vec![vec![2.0], vec![4.0]]);
    });
}

/// A hold its caller never releases only delays the next cycle: the
/// collectives after it still complete, with the right sums.
#[test]
fn a_hold_never_released_does_not_stop_the_engine() {
    run(2, EngineConfig::default(), |rank, engine| {
        engine.hold();
        for i in 0..3 {
            let sum = Operation::allreduce(ReduceOp::Sum);
            let handle = engine
                .submit(request(&format!("after.{i}"), sum, &[rank as f64]))
                .unwrap();
            let output = wait_all(vec![handle]).pop().unwrap();
            assert_eq!(to_f64s(&output.expect("allreduce").data), vec![1.0]);
        }
    });
}

/// A rank left with part of a burst its peer has not submitted yet starts
/// its next cycle at once and waits for the peer inside it: rank 0 takes both
/// tensors into one cycle (held), rank 1 submits the second only once the
/// first is done, and it completes long before the (minute-long) cycle time
/// rank 0 would otherwise have slept out.
#[test]
fn the_rest_of_a_burst_does_not_wait_out_the_cycle_time() {
    let config = EngineConfig {
        cycle_time: Duration::from_secs(60),
        ..EngineConfig::default()
    };
    let elapsed = run(2, config, |rank, engine| {
        let sum = || Operation::allreduce(ReduceOp::Sum);
        let started = std::time::Instant::now();
        let sums = if rank == 0 {
            engine.hold();
            let first = engine.submit(request("burst.0", sum(), &[1.0])).unwrap();
            let second = engine.submit(request("burst.1", sum(), &[2.0])).unwrap();
            engine.release();
            wait_all(vec![first, second])
        } else {
            let first = engine.submit(request("burst.0", sum(), &[1.0])).unwrap();
            let mut done = wait_all(vec![first]);
            let second = engine.submit(request("burst.1", sum(), &[2.0])).unwrap();
            done.extend(wait_all(vec![second]));
            done
        };
        let sums: Vec<Vec<f64>> = sums
            .into_iter()
            .map(|output| to_f64s(&output.expect("the burst's allreduce").data))
            .collect();
        assert_eq!(sums, vec![vec![2.0], vec![4.0]]);
        started.elapsed()
    });
    for took in elapsed {
        assert!(took < Duration::from_secs(10), "the burst took {took:?}");
    }
}

/// A name stays taken until its result is taken or its handle dropped, not
/// only until the ranks ran it: whether a second submission is a duplicate
/// does not depend on how fast the ranks were.
#[test]
fn a_name_stays_taken_until_its_result_is_taken() {
    run(2, EngineConfig::default(), |_, engine| {
        let sum = || Operation::allreduce(ReduceOp::Sum);
        let mut first = engine.submit(request("kept", sum(), &[1.0])).unwrap();
        assert!(first.wait_ready(WAIT), "the allreduce completes");
        let again = engine.submit(request("kept", sum(), &[1.0])).unwrap_err();
        assert_eq!(
            again.to_string(),
            "tensor 'kept' is already in flight on this rank"
        );
        assert_eq!(to_f64s(&first.wait(WAIT).unwrap().data), [2.0]);
        let second = engine.submit(request("kept", sum(), &[1.0])).unwrap();
        assert!(second.wait_ready(WAIT));
        drop(second);
        let third = engine.submit(request("kept", sum(), &[1.0])).unwrap();
        let done = wait_all(vec![third]).pop().unwrap();
        assert_eq!(to_f64s(&done.unwrap().data), [2.0]);
    });
}
