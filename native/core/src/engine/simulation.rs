//! N simulated ranks in one thread: the negotiation state machines with the
//! transport replaced by plain function calls and the clock by a counter.
//!
//! Property: whatever order and pace the ranks submit in, every rank plans
//! the same batches in the same order, each tensor exactly once.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::error::Error;
use crate::reduce::ReduceOp;

use super::config::EngineConfig;
use super::coordinator::StallReport;
use super::lockstep::SimulatedJob;
use super::negotiation::CyclePlan;
use super::request::{Operation, TensorMeta};
use super::stall::StallPolicy;
use crate::dtype::DataType;

const CYCLE: Duration = Duration::from_millis(1);

/// Per rank: the batches planned (as name lists) and the failures (name,
/// message).
type Outcome = (Vec<Vec<Vec<String>>>, Vec<Vec<(String, String)>>);

struct Sim {
    job: SimulatedJob,
    /// Cycles that had a negotiation round.
    rounds: usize,
    warnings: Vec<StallReport>,
    stopped: bool,
}

/// What one cycle did on every rank.
struct Cycle {
    plans: Vec<CyclePlan>,
}

impl Cycle {
    /// Rank `r`'s batches as lists of names.
    fn batches(&self, rank: usize) -> Vec<Vec<String>> {
        self.plans[rank]
            .batches
            .iter()
            .map(|b| b.responses.iter().map(|r| r.meta.name.clone()).collect())
            .collect()
    }

    fn failures(&self, rank: usize) -> Vec<(String, String)> {
        self.plans[rank]
            .failures
            .iter()
            .map(|(name, e)| (name.clone(), e.to_string()))
            .collect()
    }
}

impl Sim {
    fn new(size: usize, cache: usize, threshold: usize, stall: StallPolicy) -> Sim {
        let config = EngineConfig {
            cycle_time: CYCLE,
            fusion_threshold: threshold,
            stall_warning: stall.warning,
            stall_timeout: stall.timeout,
            cache_capacity: cache,
        };
        Sim {
            job: SimulatedJob::new(size, &config).unwrap(),
            rounds: 0,
            warnings: Vec::new(),
            stopped: false,
        }
    }

    fn submit(&mut self, rank: usize, meta: TensorMeta) {
        let now = self.job.now;
        self.job.ranks[rank].submit(meta, now).unwrap();
    }

    fn cycle(&mut self) -> Cycle {
        let cycle = self.job.step().unwrap();
        self.stopped |= cycle.stopped;
        self.rounds += usize::from(cycle.cost.round);
        self.warnings.extend(cycle.warnings);
        Cycle { plans: cycle.plans }
    }

    /// Runs cycles until no rank has anything in flight; returns each
    /// rank's executed batches and failures.
    fn settle(&mut self, limit: usize) -> Outcome {
        let n = self.job.size();
        let mut batches = vec![Vec::new(); n];
        let mut failures = vec![Vec::new(); n];
        for _ in 0..limit {
            if self.job.in_flight() == 0 {
                return (batches, failures);
            }
            let cycle = self.cycle();
            for r in 0..n {
                batches[r].extend(cycle.batches(r));
                failures[r].extend(cycle.failures(r));
            }
        }
        panic!("still in flight after {limit} cycles");
    }
}

fn meta(name: &str, operation: Operation, dtype: DataType, shape: &[usize]) -> TensorMeta {
    TensorMeta {
        name: name.into(),
        operation,
        dtype,
        shape: shape.to_vec(),
        on_device: false,
    }
}

fn sum_f32(name: &str, len: usize) -> TensorMeta {
    meta(
        name,
        Operation::allreduce(ReduceOp::Sum),
        DataType::F32,
        &[len],
    )
}

fn lenient() -> StallPolicy {
    StallPolicy {
        warning: Duration::from_secs(60),
        timeout: Duration::from_secs(600),
    }
}

/// A random tensor for `rank` with index `i`: allreduces of several kinds,
/// allgathers with per-rank first dimensions, broadcasts, barriers.
fn random_tensor(rng: &mut StdRng, i: usize, size: usize) -> Vec<TensorMeta> {
    let name = format!("t{i}");
    let dtype = [DataType::F32, DataType::F64, DataType::I32][rng.gen_range(0..3)];
    let len = rng.gen_range(1..40);
    match rng.gen_range(0..10) {
        0 => (0..size)
            .map(|r| meta(&name, Operation::Allgather, dtype, &[r + 1, 3]))
            .collect(),
        1 => vec![
            meta(
                &name,
                Operation::Broadcast { root: i % size },
                dtype,
                &[len]
            );
            size
        ],
        2 => vec![meta(&name, Operation::Barrier, DataType::U8, &[0]); size],
        k => {
            let op = [ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max][k % 3];
            vec![meta(&name, Operation::allreduce(op), dtype, &[len]); size]
        }
    }
}

#[test]
fn random_orders_plan_identically_on_every_rank() {
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let size = rng.gen_range(1..=5);
        let cache = [0, 4, 1024][rng.gen_range(0..3)];
        let threshold = [0, 64, 1 << 20][rng.gen_range(0..3)];
        let count = rng.gen_range(1..40);
        let tensors: Vec<Vec<TensorMeta>> = (0..count)
            .map(|i| random_tensor(&mut rng, i, size))
            .collect();
        let mut sim = Sim::new(size, cache, threshold, lenient());
        for step in 0..3 {
            let mut orders: Vec<Vec<usize>> = (0..size)
                .map(|_| {
                    let mut order: Vec<usize> = (0..count).collect();
                    order.shuffle(&mut rng);
                    order
                })
                .collect();
            let n = size;
            let mut batches = vec![Vec::new(); n];
            let mut cycles = 0;
            while orders.iter().any(|o| !o.is_empty()) || sim.job.in_flight() > 0 {
                // Each rank submits a few of its remaining tensors per cycle.
                for (rank, order) in orders.iter_mut().enumerate() {
                    for _ in 0..rng.gen_range(0..=4).min(order.len()) {
                        let i = order.remove(0);
                        sim.submit(rank, tensors[i][rank].clone());
                    }
                }
                let cycle = sim.cycle();
                for (rank, planned) in batches.iter_mut().enumerate() {
                    assert!(
                        cycle.failures(rank).is_empty(),
                        "seed {seed}: {:?}",
                        cycle.failures(rank)
                    );
                    planned.extend(cycle.batches(rank));
                }
                cycles += 1;
                assert!(cycles < 10_000, "seed {seed} step {step}: no progress");
            }
            for rank in 1..n {
                assert_eq!(
                    batches[rank], batches[0],
                    "seed {seed} step {step} rank {rank}"
                );
            }
            let mut executed: Vec<String> = batches[0].iter().flatten().cloned().collect();
            executed.sort();
            let mut expected: Vec<String> = (0..count).map(|i| format!("t{i}")).collect();
            expected.sort();
            assert_eq!(executed, expected, "seed {seed} step {step}");
        }
    }
}

#[test]
fn steady_state_needs_no_negotiation_rounds() {
    let mut sim = Sim::new(3, 1024, 1 << 20, lenient());
    let mut rng = StdRng::seed_from_u64(1);
    for step in 0..4 {
        let before = sim.rounds;
        for rank in 0..3 {
            let mut order: Vec<usize> = (0..20).collect();
            order.shuffle(&mut rng);
            for i in order {
                sim.submit(rank, sum_f32(&format!("g{i}"), 10 + i));
            }
        }
        let (batches, _) = sim.settle(100);
        assert_eq!(batches[0].concat().len(), 20);
        let rounds = sim.rounds - before;
        if step == 0 {
            assert_eq!(rounds, 1, "the first step negotiates once");
        } else {
            assert_eq!(rounds, 0, "step {step} should run from the cache alone");
        }
        assert_eq!(batches[0].len(), 1, "all 20 fuse into one batch");
    }
}

#[test]
fn small_tensors_submitted_together_fuse_into_one_batch() {
    let mut sim = Sim::new(2, 16, 100 * 4, lenient());
    for rank in 0..2 {
        for i in 0..50 {
            sim.submit(rank, sum_f32(&format!("tiny{i}"), 4));
        }
    }
    let (batches, _) = sim.settle(10);
    // 50 tensors of 16 bytes under a 400-byte threshold: 25 per batch.
    assert_eq!(batches[0].len(), 2);
    assert_eq!(batches[0][0].len(), 25);
    assert_eq!(batches[0], batches[1]);
}

#[test]
fn mismatched_shapes_fail_on_every_rank() {
    let mut sim = Sim::new(3, 16, 1 << 20, lenient());
    for rank in 0..3 {
        let len = if rank == 2 { 5 } else { 4 };
        sim.submit(rank, sum_f32("w", len));
        sim.submit(rank, sum_f32("ok", 1));
    }
    let (batches, failures) = sim.settle(10);
    for rank in 0..3 {
        assert_eq!(batches[rank], vec![vec!["ok".to_string()]]);
        assert_eq!(
            failures[rank],
            vec![(
                "w".to_string(),
                "tensor 'w' was submitted differently across ranks: shape differs: \
                 [4] on ranks [0, 1]; [5] on ranks [2]"
                    .to_string()
            )]
        );
    }
}

#[test]
fn changed_metadata_of_a_cached_tensor_is_renegotiated() {
    let mut sim = Sim::new(3, 16, 1 << 20, lenient());
    for rank in 0..3 {
        sim.submit(rank, sum_f32("w", 4));
    }
    sim.settle(10);
    // Every rank changes the shape: the cache entry is stale everywhere.
    for rank in 0..3 {
        sim.submit(rank, sum_f32("w", 6));
    }
    let (batches, failures) = sim.settle(10);
    assert!(failures.iter().all(Vec::is_empty), "{failures:?}");
    assert_eq!(batches[0], vec![vec!["w".to_string()]]);
    // Only one rank changes it back: a mismatch, found by the coordinator.
    for rank in 0..3 {
        sim.submit(rank, sum_f32("w", if rank == 1 { 4 } else { 6 }));
    }
    let (_, failures) = sim.settle(10);
    for rank_failures in &failures {
        assert_eq!(rank_failures.len(), 1);
        assert!(rank_failures[0]
            .1
            .contains("[6] on ranks [0, 2]; [4] on ranks [1]"));
    }
}

fn strict() -> StallPolicy {
    StallPolicy {
        warning: Duration::from_millis(20),
        timeout: Duration::from_millis(50),
    }
}

fn run_stall(sim: &mut Sim) -> Vec<Vec<(String, String)>> {
    let mut failures = vec![Vec::new(); sim.job.size()];
    for _ in 0..200 {
        let cycle = sim.cycle();
        for (rank, list) in failures.iter_mut().enumerate() {
            list.extend(cycle.failures(rank));
        }
        if sim.job.in_flight() == 0 {
            break;
        }
    }
    failures
}

#[test]
fn stalled_tensor_fails_naming_the_missing_ranks() {
    let mut sim = Sim::new(4, 16, 1 << 20, strict());
    for rank in [0, 2] {
        sim.submit(rank, sum_f32("lonely", 3));
    }
    let failures = run_stall(&mut sim);
    let warned: Vec<&StallReport> = sim.warnings.iter().collect();
    assert!(!warned.is_empty());
    assert_eq!(warned[0].missing, vec![1, 3]);
    assert_eq!(warned[0].submitted, vec![0, 2]);
    for rank in [0, 2] {
        assert_eq!(failures[rank].len(), 1, "rank {rank}");
        assert!(
            failures[rank][0]
                .1
                .starts_with("tensor 'lonely' stalled: ranks [1, 3] did not submit it within"),
            "{}",
            failures[rank][0].1
        );
    }
    assert_eq!(sim.job.coordinator.waiting(), 0);
}

#[test]
fn a_dead_rank_among_1024_is_named_within_the_stall_timeout() {
    let (size, dead, slow) = (1024, 617, 300);
    let mut sim = Sim::new(size, 64, 1 << 20, strict());
    let step = |sim: &mut Sim, ranks: &[usize]| {
        for &rank in ranks {
            for i in 0..8 {
                sim.submit(rank, sum_f32(&format!("grad{i}"), 100 + i));
            }
        }
    };
    let everyone: Vec<usize> = (0..size).collect();
    step(&mut sim, &everyone);
    let (_, failures) = sim.settle(5);
    assert!(failures.iter().all(Vec::is_empty));
    // The next step's tensors are cached; one rank never submits them, one
    // only after the warning (within the timeout).
    let others: Vec<usize> = (0..size).filter(|&r| r != dead && r != slow).collect();
    step(&mut sim, &others);
    let start = sim.job.now;
    let mut failures = vec![Vec::new(); size];
    for cycle in 0..100 {
        if cycle == 30 {
            step(&mut sim, &[slow]);
        }
        let done = sim.cycle();
        for (rank, list) in failures.iter_mut().enumerate() {
            list.extend(done.failures(rank));
        }
        if sim.job.in_flight() == 0 {
            break;
        }
    }
    assert_eq!(sim.job.in_flight(), 0, "still waiting after 100 cycles");
    let waited = sim.job.now - start;
    assert!(
        waited <= strict().timeout + 3 * CYCLE,
        "failed after {waited:?}"
    );
    assert!(!sim.warnings.is_empty(), "no stall warning");
    assert_eq!(sim.warnings[0].missing, vec![slow, dead]);
    assert!(sim.warnings.iter().all(|w| w.missing.contains(&dead)));
    for rank in (0..size).filter(|&r| r != dead) {
        assert_eq!(failures[rank].len(), 8, "rank {rank}");
        for (name, message) in &failures[rank] {
            let expected = format!("tensor '{name}' stalled: ranks [{dead}] did not submit it");
            assert!(message.starts_with(&expected), "rank {rank}: {message}");
        }
    }
}

#[test]
fn stalled_cached_tensor_goes_back_to_the_coordinator() {
    let mut sim = Sim::new(3, 16, 1 << 20, strict());
    for rank in 0..3 {
        sim.submit(rank, sum_f32("w", 2));
    }
    sim.settle(10);
    // Now cached; rank 1 does not submit it again.
    for rank in [0, 2] {
        sim.submit(rank, sum_f32("w", 2));
    }
    let failures = run_stall(&mut sim);
    for rank in [0, 2] {
        assert_eq!(failures[rank].len(), 1, "rank {rank}");
        assert!(failures[rank][0].1.contains("ranks [1] did not submit"));
    }
    // The tensor works again afterwards.
    for rank in 0..3 {
        sim.submit(rank, sum_f32("w", 2));
    }
    let (batches, failures) = sim.settle(20);
    assert!(failures.iter().all(Vec::is_empty));
    assert_eq!(batches[2], vec![vec!["w".to_string()]]);
}

#[test]
fn a_late_rank_within_the_timeout_still_completes() {
    let mut sim = Sim::new(2, 16, 1 << 20, strict());
    sim.submit(0, sum_f32("late", 1));
    for _ in 0..30 {
        sim.cycle();
    }
    assert!(!sim.warnings.is_empty(), "warned after 20 ms");
    sim.submit(1, sum_f32("late", 1));
    let (batches, failures) = sim.settle(5);
    assert!(failures.iter().all(Vec::is_empty));
    assert_eq!(batches[0], vec![vec!["late".to_string()]]);
}

#[test]
fn duplicate_names_are_rejected_and_shutdown_stops_every_rank() {
    let mut sim = Sim::new(2, 16, 1 << 20, lenient());
    sim.submit(0, sum_f32("x", 1));
    let err = sim.job.ranks[0]
        .submit(sum_f32("x", 1), sim.job.now)
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateName { .. }), "{err}");
    sim.job.ranks[1].request_shutdown();
    sim.cycle();
    assert!(sim.stopped);
}

#[test]
fn random_faults_fail_identically_and_spare_the_other_tensors() {
    for seed in 0..30u64 {
        let mut rng = StdRng::seed_from_u64(1000 + seed);
        let size = rng.gen_range(2..=4);
        let cache = [0, 3, 64][rng.gen_range(0..3)];
        let count = rng.gen_range(5..25);
        let mut sim = Sim::new(size, cache, 256, strict());
        for step in 0..3 {
            // Per tensor: healthy, omitted by one rank, or reshaped on one.
            let faults: Vec<(u8, usize)> = (0..count)
                .map(|_| (rng.gen_range(0..8u8), rng.gen_range(0..size)))
                .collect();
            let mut orders: Vec<Vec<usize>> = (0..size)
                .map(|rank| {
                    let mut order: Vec<usize> = (0..count)
                        .filter(|&i| !(faults[i].0 == 0 && faults[i].1 == rank))
                        .collect();
                    order.shuffle(&mut rng);
                    order
                })
                .collect();
            let mut batches = vec![Vec::new(); size];
            let mut failures = vec![Vec::new(); size];
            for _ in 0..2_000 {
                for (rank, order) in orders.iter_mut().enumerate() {
                    for _ in 0..rng.gen_range(0..=3).min(order.len()) {
                        let i = order.remove(0);
                        let reshaped = faults[i].0 == 1 && faults[i].1 == rank;
                        sim.submit(rank, sum_f32(&format!("t{i}"), 4 + usize::from(reshaped)));
                    }
                }
                let cycle = sim.cycle();
                for rank in 0..size {
                    batches[rank].extend(cycle.batches(rank));
                    failures[rank].extend(cycle.failures(rank));
                }
                let idle = sim.job.in_flight() == 0;
                if idle && orders.iter().all(Vec::is_empty) {
                    break;
                }
            }
            let context = format!("seed {seed} step {step}");
            assert!(sim.job.in_flight() == 0, "{context}");
            for rank in 1..size {
                assert_eq!(batches[rank], batches[0], "{context} rank {rank}");
            }
            let executed: Vec<String> = batches[0].concat();
            for (i, &(fault, odd)) in faults.iter().enumerate() {
                let name = format!("t{i}");
                let ran = executed.contains(&name);
                for (rank, failed) in failures.iter().enumerate() {
                    let message = failed.iter().find(|(n, _)| *n == name).map(|(_, m)| m);
                    match fault {
                        0 if rank == odd => assert!(message.is_none(), "{context} {name}"),
                        0 => assert!(
                            message.is_some_and(|m| m.contains(&format!("ranks [{odd}] did"))),
                            "{context} {name} rank {rank}: {message:?}"
                        ),
                        1 => assert!(
                            message.is_some_and(|m| m.contains("shape differs")),
                            "{context} {name} rank {rank}: {message:?}"
                        ),
                        _ => assert!(message.is_none(), "{context} {name}: {message:?}"),
                    }
                }
                assert_eq!(ran, fault > 1, "{context} {name}");
            }
        }
    }
}

fn join_meta() -> TensorMeta {
    meta("join", Operation::Join, DataType::I32, &[])
}

/// Runs `cycles` cycles (a joined rank keeps its join in flight, so
/// `settle` would not return); each rank's batches and failures.
fn run_cycles(sim: &mut Sim, cycles: usize) -> Outcome {
    let n = sim.job.size();
    let mut batches = vec![Vec::new(); n];
    let mut failures = vec![Vec::new(); n];
    for _ in 0..cycles {
        let cycle = sim.cycle();
        for r in 0..n {
            batches[r].extend(cycle.batches(r));
            failures[r].extend(cycle.failures(r));
        }
    }
    (batches, failures)
}

#[test]
fn a_joined_rank_plans_what_the_others_submit_and_every_join_names_the_last() {
    let mut sim = Sim::new(3, 16, 1 << 20, lenient());
    sim.submit(1, join_meta());
    // The same name step after step: the joined rank keeps the cache empty.
    for step in 0..3 {
        for r in [0, 2] {
            sim.submit(r, sum_f32("grad", 4));
        }
        let (batches, failures) = run_cycles(&mut sim, 5);
        assert!(
            failures.iter().all(Vec::is_empty),
            "step {step}: {failures:?}"
        );
        for (r, planned) in batches.iter().enumerate() {
            assert_eq!(
                planned,
                &vec![vec!["grad".to_string()]],
                "step {step} rank {r}"
            );
        }
    }
    sim.submit(2, join_meta());
    sim.cycle();
    sim.submit(0, join_meta());
    let mut joins = vec![None; 3];
    for _ in 0..5 {
        let cycle = sim.cycle();
        for (r, plan) in cycle.plans.iter().enumerate() {
            for batch in &plan.batches {
                joins[r] = Some(batch.responses[0].first_dims.clone());
            }
        }
    }
    assert_eq!(joins, vec![Some(vec![0]); 3]);
    // After the join the cache works again: a repeated tensor needs no round.
    for r in 0..3 {
        sim.submit(r, sum_f32("grad", 4));
    }
    sim.settle(20);
    let rounds = sim.rounds;
    for r in 0..3 {
        sim.submit(r, sum_f32("grad", 4));
    }
    sim.settle(20);
    assert_eq!(sim.rounds, rounds);
}

#[test]
fn tensors_submitted_before_the_last_join_complete_before_it() {
    let mut sim = Sim::new(2, 16, 1 << 20, lenient());
    sim.submit(0, sum_f32("late", 2));
    sim.submit(0, join_meta());
    sim.cycle();
    sim.submit(1, sum_f32("early", 2));
    sim.submit(1, join_meta());
    let (batches, failures) = run_cycles(&mut sim, 5);
    assert!(failures.iter().all(Vec::is_empty), "{failures:?}");
    let names = |r: usize| -> Vec<String> { batches[r].iter().flatten().cloned().collect() };
    // "late" waited for rank 1, "early" ran as soon as rank 1 submitted it (rank 0 had joined).
    for r in 0..2 {
        let planned = names(r);
        assert_eq!(
            planned.last().map(String::as_str),
            Some("join"),
            "rank {r}: {planned:?}"
        );
        assert!(
            planned.contains(&"early".to_string()),
            "rank {r}: {planned:?}"
        );
    }
}
