//! The engine on real rank processes over the TCP communicator: tensors
//! submitted in a different order on every rank, fusion, and the errors that
//! must reach every rank (mismatch, stall) instead of a hang.
//!
//! Data is integer-valued, so sums are exact whatever the reduction order
//! or fusion layout, and results are compared with `==`.

mod common;

use std::time::Duration;

use common::{say, say_err, Job};
use horovod_core::{
    Communicator, DataType, Engine, EngineConfig, Handle, Operation, ReduceOp, Request,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

const WAIT: Duration = Duration::from_secs(30);
const DTYPES: [DataType; 4] = [DataType::F32, DataType::F64, DataType::I32, DataType::I64];

/// Rank `rank`'s value at element `j` of tensor `i`.
fn value(rank: usize, i: usize, j: usize) -> i64 {
    ((rank * 1009 + i * 31 + j * 7) % 101) as i64 - 50
}

fn encode(dtype: DataType, values: impl Iterator<Item = i64>) -> Vec<u8> {
    values
        .flat_map(|v| match dtype {
            DataType::F32 => (v as f32).to_ne_bytes().to_vec(),
            DataType::F64 => (v as f64).to_ne_bytes().to_vec(),
            DataType::I32 => (v as i32).to_ne_bytes().to_vec(),
            _ => v.to_ne_bytes().to_vec(),
        })
        .collect()
}

/// Tensor `i` of `rank`: `len` elements of the `i`-th element type, summed.
fn tensor(rank: usize, i: usize, len: usize) -> Request {
    let dtype = DTYPES[i % DTYPES.len()];
    Request {
        name: format!("layer{i}/grad"),
        operation: Operation::allreduce(ReduceOp::Sum),
        dtype,
        shape: vec![len],
        data: encode(dtype, (0..len).map(|j| value(rank, i, j))),
    }
}

fn expected(size: usize, i: usize, len: usize) -> Vec<u8> {
    let dtype = DTYPES[i % DTYPES.len()];
    encode(
        dtype,
        (0..len).map(|j| (0..size).map(|r| value(r, i, j)).sum()),
    )
}

fn engine(comm: Communicator, config: EngineConfig) -> Result<Engine, String> {
    Engine::start(comm, config).map_err(|e| format!("start: {e}"))
}

fn wait(mut handle: Handle) -> Result<Vec<u8>, String> {
    let name = handle.name().to_string();
    handle
        .wait(WAIT)
        .map(|o| o.data)
        .map_err(|e| format!("{name}: {e}"))
}

/// 50 tensors in a rank-specific random order, twice (the second time from
/// the response cache); every result checked.
fn random_orders(comm: Communicator) -> Result<String, String> {
    let (rank, size) = (comm.rank(), comm.size());
    let engine = engine(comm, EngineConfig::default())?;
    let len = |i: usize| 1 + (i * 37) % 300;
    for step in 0..2 {
        let mut order: Vec<usize> = (0..50).collect();
        order.shuffle(&mut StdRng::seed_from_u64((rank * 10 + step) as u64));
        let mut handles = Vec::new();
        for &i in &order {
            let handle = engine
                .submit(tensor(rank, i, len(i)))
                .map_err(|e| e.to_string())?;
            handles.push((i, handle));
        }
        for (i, handle) in handles {
            if wait(handle)? != expected(size, i, len(i)) {
                return Err(format!("step {step}: tensor {i} has a wrong sum"));
            }
        }
    }
    Ok("50 tensors, twice".into())
}

/// 200 tiny tensors submitted at once (fused), then one at a time.
fn fused_equals_unfused(comm: Communicator) -> Result<String, String> {
    let (rank, size) = (comm.rank(), comm.size());
    let engine = engine(comm, EngineConfig::default())?;
    let count = 200;
    let handles: Vec<Handle> = (0..count)
        .map(|i| engine.submit(tensor(rank, i, 1 + i % 5)))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let fused: Vec<Vec<u8>> = handles.into_iter().map(wait).collect::<Result<_, _>>()?;
    for (i, got) in fused.iter().enumerate() {
        let one = engine
            .submit(tensor(rank, i, 1 + i % 5))
            .map_err(|e| e.to_string())?;
        let alone = wait(one)?;
        if *got != alone || alone != expected(size, i, 1 + i % 5) {
            return Err(format!("tensor {i}: fused and unfused results differ"));
        }
    }
    Ok(format!("{count} tensors"))
}

/// Child entry point; a no-op in the parent.
#[test]
fn child_entry() {
    let Some(rank) = common::child_rank() else {
        return;
    };
    let comm = match common::rendezvous(rank) {
        (Ok(comm), _) => comm,
        (Err(e), _) => return say_err(&e),
    };
    let size = comm.size();
    let report = |result: Result<String, String>| match result {
        Ok(detail) => say(format!("OK {detail}")),
        Err(failure) => say(format!("FAIL {failure}")),
    };
    match common::scenario().as_str() {
        "random" => report(random_orders(comm)),
        "fused" => report(fused_equals_unfused(comm)),
        "mismatch" => {
            let engine = match engine(comm, EngineConfig::default()) {
                Ok(engine) => engine,
                Err(e) => return say(format!("FAIL {e}")),
            };
            // The last rank submits "w" with another shape.
            let len = if rank == size - 1 { 4 } else { 3 };
            let bad = engine.submit(tensor(rank, 1, len));
            let good = engine.submit(tensor(rank, 2, 3));
            match bad.map(|mut h| h.wait(WAIT)) {
                Ok(Err(e)) => say_err(&e),
                other => say(format!("FAIL mismatched tensor gave {other:?}")),
            }
            match good.map(wait) {
                Ok(Ok(data)) if data == expected(size, 2, 3) => say("OK carried on"),
                other => say(format!("FAIL good tensor gave {other:?}")),
            }
        }
        "stall" => {
            let config = EngineConfig {
                stall_warning: Duration::from_millis(300),
                stall_timeout: Duration::from_millis(1000),
                ..EngineConfig::default()
            };
            let engine = match engine(comm, config) {
                Ok(engine) => engine,
                Err(e) => return say(format!("FAIL {e}")),
            };
            if rank == size - 1 {
                // Never submits it; stays up until the others have failed it.
                std::thread::sleep(Duration::from_millis(2500));
                return say("OK absent");
            }
            match engine.submit(tensor(rank, 0, 2)).map(|mut h| h.wait(WAIT)) {
                Ok(Err(e)) => say_err(&e),
                other => say(format!("FAIL stalled tensor gave {other:?}")),
            }
        }
        other => panic!("unknown scenario {other}"),
    }
}

fn run(scenario: &str, size: usize) -> Vec<Vec<String>> {
    let mut job = Job::start(scenario, common::specs(size));
    job.send_all();
    job.finish(Duration::from_secs(60))
}

#[test]
fn random_submission_orders_on_four_processes() {
    for (rank, lines) in run("random", 4).iter().enumerate() {
        assert!(
            lines.last().is_some_and(|l| l.starts_with("OK")),
            "rank {rank}: {lines:?}"
        );
    }
}

#[test]
fn fused_tiny_tensors_equal_one_by_one_on_three_processes() {
    for (rank, lines) in run("fused", 3).iter().enumerate() {
        assert_eq!(lines, &["OK 200 tensors"], "rank {rank}");
    }
}

#[test]
fn mismatched_shape_fails_on_every_rank_by_name() {
    for (rank, lines) in run("mismatch", 3).iter().enumerate() {
        assert_eq!(lines.len(), 2, "rank {rank}: {lines:?}");
        let (kind, message) = common::parse_err(&lines[0]);
        assert_eq!(kind, "TensorMismatch", "rank {rank}: {lines:?}");
        assert_eq!(
            message,
            "tensor 'layer1/grad' was submitted differently across ranks: \
             shape differs: [3] on ranks [0, 1]; [4] on ranks [2]"
        );
        assert_eq!(lines[1], "OK carried on");
    }
}

#[test]
fn tensor_missing_on_one_rank_fails_naming_it() {
    let outputs = run("stall", 3);
    for (rank, lines) in outputs.iter().enumerate().take(2) {
        assert_eq!(lines.len(), 1, "rank {rank}: {lines:?}");
        let (kind, message) = common::parse_err(&lines[0]);
        assert_eq!(kind, "Stalled", "rank {rank}: {lines:?}");
        assert!(
            message.starts_with("tensor 'layer0/grad' stalled: ranks [2] did not submit it"),
            "{message}"
        );
    }
    assert_eq!(outputs[2], ["OK absent"]);
}
