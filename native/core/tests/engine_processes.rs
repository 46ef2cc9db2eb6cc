//! The engine on real rank processes over the TCP communicator: tensors
//! submitted in a different order on every rank, every collective the engine
//! runs (broadcast, allgather, alltoall, reducescatter, scaled allreduce of
//! half-precision floats), fusion, and the errors that must reach every rank
//! (mismatch, stall) instead of a hang.
//!
//! Data is integer-valued, so sums are exact whatever the reduction order
//! or fusion layout, and results are compared with `==`.

mod common;

use std::time::Duration;

use common::{say, say_err, Job};
use horovod_core::nccl::{DevicePtr, StreamHandle};
use horovod_core::{
    bf16, f16, Communicator, DataType, Engine, EngineConfig, Handle, Operation, Output, Payload,
    ReduceOp, Request,
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
        data: encode(dtype, (0..len).map(|j| value(rank, i, j))).into(),
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
        .map(|o| o.data.into_vec())
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

/// Native-endian bytes of `values` converted by `to_bytes`.
fn bytes<T, const N: usize>(
    values: impl Iterator<Item = T>,
    to_bytes: fn(T) -> [u8; N],
) -> Vec<u8> {
    values.flat_map(to_bytes).collect()
}

fn request(
    name: &str,
    operation: Operation,
    dtype: DataType,
    shape: &[usize],
    data: Vec<u8>,
) -> Request {
    Request {
        name: name.into(),
        operation,
        dtype,
        shape: shape.to_vec(),
        data: data.into(),
    }
}

/// Rank `rank`'s tensors for every non-allreduce collective and a scaled
/// half-precision allreduce, each with the result every rank must get.
fn collectives(rank: usize, size: usize) -> Vec<(Request, Output)> {
    let i32s = |v: &mut dyn Iterator<Item = i32>| bytes(v, i32::to_ne_bytes);
    let i64s = |v: &mut dyn Iterator<Item = i64>| bytes(v, i64::to_ne_bytes);
    let f32s = |v: &mut dyn Iterator<Item = f32>| bytes(v, f32::to_ne_bytes);
    let (r, n) = (rank as i64, size as i64);
    // Broadcast from rank 1 of a [2, 2] int tensor.
    let broadcast = (
        request(
            "bcast",
            Operation::Broadcast { root: 1 },
            DataType::I32,
            &[2, 2],
            i32s(&mut (0..4).map(|j| 10 * rank as i32 + j)),
        ),
        Output {
            data: Payload::from(i32s(&mut (0..4).map(|j| 10 + j))),
            shape: vec![2, 2],
        },
    );
    // Allgather of rank + 1 rows of 2 longs each.
    let rows = |p: i64| (0..(p + 1) * 2).map(move |k| 100 * p + k);
    let total_rows = (1..=size).sum::<usize>();
    let allgather = (
        request(
            "gather",
            Operation::Allgather,
            DataType::I64,
            &[rank + 1, 2],
            i64s(&mut rows(r)),
        ),
        Output {
            data: Payload::from(i64s(&mut (0..n).flat_map(rows))),
            shape: vec![total_rows, 2],
        },
    );
    // Alltoall: rank p sends p + 1 rows of 3 longs to each rank q, valued 1000 p + 10 q + k.
    let block = |p: i64, q: i64| (0..(p + 1) * 3).map(move |k| 1000 * p + 10 * q + k);
    let alltoall = (
        request(
            "a2a",
            Operation::Alltoall {
                splits: vec![rank + 1; size],
            },
            DataType::I64,
            &[(rank + 1) * size, 3],
            i64s(&mut (0..n).flat_map(|q| block(r, q))),
        ),
        Output {
            data: Payload::from(i64s(&mut (0..n).flat_map(|p| block(p, r)))),
            shape: vec![total_rows, 3],
        },
    );
    // Reducescatter of 7 rows of 3 floats: rank p gives (p + 1) * element;
    // the rows split 3, 2, 2 over three ranks.
    let (rows_total, width) = (7usize, 3usize);
    let sum_weights = (size * (size + 1) / 2) as f32;
    let first_row: usize = (0..rank)
        .map(|p| rows_total / size + usize::from(p < rows_total % size))
        .sum();
    let my_rows = rows_total / size + usize::from(rank < rows_total % size);
    let reducescatter = (
        request(
            "scatter",
            Operation::Reducescatter { op: ReduceOp::Sum },
            DataType::F32,
            &[rows_total, width],
            f32s(&mut (0..rows_total * width).map(|e| (rank + 1) as f32 * e as f32)),
        ),
        Output {
            data: Payload::from(f32s(
                &mut (first_row * width..(first_row + my_rows) * width)
                    .map(|e| sum_weights * e as f32),
            )),
            shape: vec![my_rows, width],
        },
    );
    // Scaled sums of half-precision floats: (2 (p + 1)) summed, then halved.
    let scaled = Operation::Allreduce {
        op: ReduceOp::Sum,
        prescale: 2.0,
        postscale: 0.5,
    };
    let half = (
        request(
            "half",
            scaled.clone(),
            DataType::F16,
            &[3],
            bytes(
                (0..3).map(|_| f16::from_f32((rank + 1) as f32)),
                f16::to_ne_bytes,
            ),
        ),
        Output {
            data: Payload::from(bytes(
                (0..3).map(|_| f16::from_f32(sum_weights)),
                f16::to_ne_bytes,
            )),
            shape: vec![3],
        },
    );
    let brain = (
        request(
            "brain",
            scaled,
            DataType::Bf16,
            &[2],
            bytes(
                (0..2).map(|_| bf16::from_f32((rank + 1) as f32)),
                bf16::to_ne_bytes,
            ),
        ),
        Output {
            data: Payload::from(bytes(
                (0..2).map(|_| bf16::from_f32(sum_weights)),
                bf16::to_ne_bytes,
            )),
            shape: vec![2],
        },
    );
    vec![broadcast, allgather, alltoall, reducescatter, half, brain]
}

/// Every collective, submitted in a rank-specific order, three times (the
/// later times mostly from the response cache); every result checked.
fn every_collective(comm: Communicator) -> Result<String, String> {
    let (rank, size) = (comm.rank(), comm.size());
    let engine = engine(comm, EngineConfig::default())?;
    for step in 0..3 {
        let mut tensors = collectives(rank, size);
        tensors.shuffle(&mut StdRng::seed_from_u64((rank * 10 + step) as u64));
        let mut handles = Vec::new();
        for (request, want) in tensors {
            let handle = engine.submit(request).map_err(|e| e.to_string())?;
            handles.push((handle, want));
        }
        for (mut handle, want) in handles {
            let name = handle.name().to_string();
            let got = handle
                .wait(WAIT)
                .map_err(|e| format!("step {step}: {name}: {e}"))?;
            if got != want {
                return Err(format!("step {step}: {name}: got {got:?}, want {want:?}"));
            }
        }
    }
    Ok("6 collectives, three times".into())
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
        "collectives" => report(every_collective(comm)),
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
        "gpu" => report(gpu_tensors_without_nccl(comm)),
        other => panic!("unknown scenario {other}"),
    }
}

/// A GPU tensor's allreduce: `rank`'s payload on `device` (no memory is
/// touched: NCCL setup fails first, or the negotiation does).
fn gpu_request(name: &str, device: usize) -> Request {
    // SAFETY: never dereferenced: there is no NCCL on the test hosts (and
    // no device 9999 on any), so setup fails on every rank first.
    let data =
        unsafe { Payload::device(DevicePtr(0x1000), 12, device, StreamHandle(0), Box::new(())) };
    Request {
        name: name.into(),
        operation: Operation::allreduce(ReduceOp::Sum),
        dtype: DataType::F32,
        shape: vec![3],
        data,
    }
}

/// GPU tensors where NCCL cannot be set up: every rank fails each one with
/// the same error, a second device is refused at submission, a tensor on
/// the GPU on some ranks and the host on others is a mismatch, and host
/// tensors carry on.
fn gpu_tensors_without_nccl(comm: Communicator) -> Result<String, String> {
    let (rank, size) = (comm.rank(), comm.size());
    let engine = engine(comm, EngineConfig::default())?;
    let expected_setup_error = if horovod_core::nccl::CUDA_SUPPORT {
        "NCCL unavailable"
    } else {
        "has no CUDA support"
    };
    for name in ["gpu.0", "gpu.1"] {
        match engine
            .submit(gpu_request(name, 9999))
            .map(|mut h| h.wait(WAIT))
        {
            Ok(Err(e)) if e.to_string().contains(expected_setup_error) => {}
            other => return Err(format!("{name} gave {other:?}")),
        }
    }
    match engine.submit(gpu_request("gpu.other", 9998)) {
        Err(e)
            if e.to_string()
                .contains("this rank's GPU tensors are on cuda:9999") => {}
        other => return Err(format!("a second device gave {other:?}")),
    }
    let mixed = if rank == 0 {
        tensor(rank, 0, 3)
    } else {
        Request {
            name: "layer0/grad".into(),
            ..gpu_request("", 9999)
        }
    };
    match engine.submit(mixed).map(|mut h| h.wait(WAIT)) {
        Ok(Err(e))
            if e.to_string()
                .contains("memory differs: host on ranks [0]; GPU on ranks") => {}
        other => return Err(format!("host and GPU tensor gave {other:?}")),
    }
    match engine.submit(tensor(rank, 2, 3)).map(wait) {
        Ok(Ok(data)) if data == expected(size, 2, 3) => Ok("GPU tensors failed alike".into()),
        other => Err(format!("host tensor after them gave {other:?}")),
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
fn every_collective_in_random_orders_on_three_processes() {
    for (rank, lines) in run("collectives", 3).iter().enumerate() {
        assert_eq!(lines, &["OK 6 collectives, three times"], "rank {rank}");
    }
}

#[test]
fn every_collective_in_random_orders_on_two_processes() {
    for (rank, lines) in run("collectives", 2).iter().enumerate() {
        assert_eq!(lines, &["OK 6 collectives, three times"], "rank {rank}");
    }
}

#[test]
fn fused_tiny_tensors_equal_one_by_one_on_three_processes() {
    for (rank, lines) in run("fused", 3).iter().enumerate() {
        assert_eq!(lines, &["OK 200 tensors"], "rank {rank}");
    }
}

#[test]
fn gpu_tensors_fail_alike_on_every_rank_without_nccl() {
    for (rank, lines) in run("gpu", 2).iter().enumerate() {
        assert_eq!(lines, &["OK GPU tensors failed alike"], "rank {rank}");
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
