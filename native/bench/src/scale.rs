//! `horovod-bench-scale`: how horovod-rs grows with the job's size, as CSV
//! rows `scale,<what>,<ranks>,<value>,<unit>` (`make bench-scale`).
//!
//! * `negotiation_*` at 64 to 4,096 ranks: the engine's own negotiation
//!   ([`SimulatedJob`]: every rank's state machine and rank 0's coordinator
//!   in this process, the transport's exchanges replaced by calls) for one
//!   ResNet-50 step of 161 gradient tensors. CPU microseconds per cycle on
//!   the coordinator (rank 0) and on a worker (the mean of the others);
//!   cold (the first step: every tensor goes through the coordinator) and
//!   steady (the response cache: a bit vector per cycle); the bytes each of
//!   the cycle's exchanges moves.
//! * `service_*`: the driver's rendezvous service (a child process) taking
//!   1,024 registrations at once: the time until every rank has the list,
//!   the service's memory.
//! * `join_*`, `first_allreduce`, `*_per_rank`: real ranks, as threads of
//!   this process, joining through the service (`launch::join_json`, what
//!   every launcher calls) on 127.0.0.1, each on a host of its own
//!   (`HOROVOD_HOSTNAME`, as ranks across machines: TCP, no shared memory),
//!   then their first allreduce; the sockets and threads the job added, per
//!   rank (`/proc/self/fd`, `/proc/self/task`).
//!
//! * `small_broadcast`, `small_allgather`: a TCP mesh of threads
//!   broadcasting one float32 (allgathering one from each rank), the median
//!   over the ranks of their mean time per collective: mostly the header
//!   check every collective opens with (and the allgather's exchange of
//!   counts), then the chain's or the ring's hops.
//!
//! Usage: `horovod-bench-scale` (everything), or with any of `negotiation`,
//! `service`, `join`, `broadcast` to run only those.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use horovod_core::engine::{CycleCost, SimulatedJob};
use horovod_core::launch::join_json;
use horovod_core::{
    connect, exchange_entries, CommConfig, DataType, EngineConfig, Listener, Operation, ReduceOp,
    RendezvousService, Request, TransportPolicy,
};

const SECRET: &[u8] = b"horovod-bench-scale";
const NEGOTIATION_RANKS: [usize; 4] = [64, 256, 1024, 4096];
const SERVICE_RANKS: usize = 1024;
const JOIN_RANKS: [usize; 8] = [2, 4, 8, 16, 32, 64, 256, 1024];
const BROADCAST_RANKS: [usize; 5] = [4, 8, 16, 32, 64];
const BROADCASTS: usize = 200;
const TIMEOUT: Duration = Duration::from_secs(120);
/// Cold steps (each a fresh job) and steady steps measured per size; the
/// median is reported.
const COLD_RUNS: usize = 3;
const STEADY_STEPS: usize = 15;
/// Argument that makes this binary the rendezvous service's process.
const SERVICE_CHILD: &str = "--service-child";

fn main() -> ExitCode {
    // One process holds thousands of ranks' state: keep freed memory for
    // reuse, as each rank's own process would, so the kernel's page faults
    // for memory the simulation hands back and forth are not counted as
    // negotiation.
    // SAFETY: called before any other thread exists; only tunes malloc.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_MXFAST, 0);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if args.first().map(String::as_str) == Some(SERVICE_CHILD) {
        service_child(args.get(1).map(String::as_str).unwrap_or(""))
    } else {
        run(&args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("horovod-bench-scale: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    const PARTS: [&str; 4] = ["negotiation", "service", "join", "broadcast"];
    if let Some(unknown) = args.iter().find(|a| !PARTS.contains(&a.as_str())) {
        return Err(format!("unknown part {unknown:?}; the parts are {PARTS:?}"));
    }
    let wanted = |part: &str| args.is_empty() || args.iter().any(|a| a == part);
    if wanted("negotiation") {
        for ranks in NEGOTIATION_RANKS {
            negotiation(ranks)?;
        }
    }
    if wanted("service") {
        service(SERVICE_RANKS)?;
    }
    if wanted("join") {
        for ranks in join_ranks()? {
            join(ranks)?;
        }
    }
    if wanted("broadcast") {
        for ranks in BROADCAST_RANKS {
            small_collectives(ranks)?;
        }
    }
    Ok(())
}

/// [`JOIN_RANKS`], or the sizes `HOROVOD_BENCH_JOIN_RANKS` lists ("256,1024").
fn join_ranks() -> Result<Vec<usize>, String> {
    match std::env::var("HOROVOD_BENCH_JOIN_RANKS") {
        Ok(list) => list
            .split(',')
            .map(|n| {
                n.trim().parse().map_err(|_| {
                    format!("HOROVOD_BENCH_JOIN_RANKS: {n:?} is not a number of ranks")
                })
            })
            .collect(),
        Err(_) => Ok(JOIN_RANKS.to_vec()),
    }
}

fn row(what: &str, ranks: usize, value: f64, unit: &str) {
    println!("scale,{what},{ranks},{value:.1},{unit}");
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

// ---------------------------------------------------------------- negotiation

/// ResNet-50's 161 parameter tensors (torchvision's names and sizes), as
/// Horovod's optimizer names their gradients' allreduces.
fn resnet50_step() -> Vec<Request> {
    let mut tensors: Vec<(String, usize)> = vec![
        ("conv1.weight".into(), 64 * 3 * 7 * 7),
        ("bn1.weight".into(), 64),
        ("bn1.bias".into(), 64),
    ];
    let mut inputs = 64;
    for (layer, (blocks, width)) in [(3, 64), (4, 128), (6, 256), (3, 512)]
        .into_iter()
        .enumerate()
    {
        for block in 0..blocks {
            let prefix = format!("layer{}.{block}", layer + 1);
            let convs = [(inputs, width, 1), (width, width, 3), (width, 4 * width, 1)];
            for (k, (from, to, kernel)) in convs.into_iter().enumerate() {
                tensors.push((
                    format!("{prefix}.conv{}.weight", k + 1),
                    from * to * kernel * kernel,
                ));
                tensors.push((format!("{prefix}.bn{}.weight", k + 1), to));
                tensors.push((format!("{prefix}.bn{}.bias", k + 1), to));
            }
            if block == 0 {
                tensors.push((format!("{prefix}.downsample.0.weight"), inputs * 4 * width));
                tensors.push((format!("{prefix}.downsample.1.weight"), 4 * width));
                tensors.push((format!("{prefix}.downsample.1.bias"), 4 * width));
            }
            inputs = 4 * width;
        }
    }
    tensors.push(("fc.weight".into(), 2048 * 1000));
    tensors.push(("fc.bias".into(), 1000));
    tensors
        .into_iter()
        .map(|(name, len)| Request {
            name: format!("allreduce.{name}"),
            operation: Operation::allreduce(ReduceOp::Average),
            dtype: DataType::F32,
            shape: vec![len],
            data: Vec::new().into(), // the simulation looks at metadata only
        })
        .collect()
}

/// Every rank submits the step, then cycles run until it has run
/// everywhere; their costs summed.
fn run_step(job: &mut SimulatedJob, step: &[Request]) -> Result<CycleCost, String> {
    settle_malloc();
    for rank in 0..job.size() {
        for request in step {
            job.submit(rank, request).map_err(|e| e.to_string())?;
        }
    }
    let mut total = CycleCost {
        workers: vec![Duration::ZERO; job.size() - 1],
        ..CycleCost::default()
    };
    for _ in 0..10 {
        let cost = job.cycle().map_err(|e| e.to_string())?;
        if let Some((rank, name, error)) = cost.failed.first() {
            return Err(format!("rank {rank}: {name} failed: {error}"));
        }
        total.coordinator += cost.coordinator;
        for (sum, spent) in total.workers.iter_mut().zip(&cost.workers) {
            *sum += *spent;
        }
        total.bits_per_rank += cost.bits_per_rank;
        total.requests += cost.requests;
        total.responses += cost.responses;
        total.round |= cost.round;
        total.planned += cost.planned;
        if job.in_flight() == 0 {
            return Ok(total);
        }
    }
    Err(format!(
        "the step still had {} tensors in flight after 10 cycles",
        job.in_flight()
    ))
}

/// Sorts the chunks every rank freed at the end of the last step into
/// malloc's bins now: otherwise the first allocation after them, rank 0's,
/// pays for sorting all ranks' (a rank's own process sorts only its own).
fn settle_malloc() {
    // SAFETY: a plain allocation, freed at once (a large request makes
    // glibc sort its unsorted chunks first).
    unsafe { libc::free(libc::malloc(8 << 20)) }
}

fn worker_micros(cost: &CycleCost) -> f64 {
    micros(cost.workers.iter().sum::<Duration>()) / cost.workers.len().max(1) as f64
}

fn negotiation(ranks: usize) -> Result<(), String> {
    let step = resnet50_step();
    let config = EngineConfig::default();
    let new_job = || SimulatedJob::new(ranks, &config).map_err(|e| e.to_string());
    let mut cold = Vec::new();
    let mut job = new_job()?;
    for run in 0..COLD_RUNS {
        if run > 0 {
            job = new_job()?;
        }
        cold.push(run_step(&mut job, &step)?);
    }
    let mut steady = Vec::new();
    for _ in 0..STEADY_STEPS {
        let cost = run_step(&mut job, &step)?;
        if cost.round {
            return Err("a steady step went through the coordinator".into());
        }
        steady.push(cost);
    }
    for (kind, costs) in [("cold", &cold), ("steady", &steady)] {
        let first = &costs[0];
        if first.planned != step.len() {
            return Err(format!(
                "{kind}: {} of {} tensors planned",
                first.planned,
                step.len()
            ));
        }
        let coordinator = median(costs.iter().map(|c| micros(c.coordinator)).collect());
        let worker = median(costs.iter().map(worker_micros).collect());
        row(
            &format!("negotiation_{kind}_coordinator_cpu"),
            ranks,
            coordinator,
            "us",
        );
        row(
            &format!("negotiation_{kind}_worker_cpu"),
            ranks,
            worker,
            "us",
        );
        row(
            &format!("negotiation_{kind}_bits_per_rank"),
            ranks,
            first.bits_per_rank as f64,
            "bytes",
        );
        row(
            &format!("negotiation_{kind}_requests"),
            ranks,
            first.requests as f64,
            "bytes",
        );
        row(
            &format!("negotiation_{kind}_responses"),
            ranks,
            first.responses as f64,
            "bytes",
        );
    }
    Ok(())
}

// -------------------------------------------------------------------- service

/// The service's process: prints its port, serves until stdin closes.
fn service_child(size: &str) -> Result<(), String> {
    let size: usize = size.parse().map_err(|_| format!("bad size {size:?}"))?;
    let service =
        RendezvousService::start("127.0.0.1:0", SECRET, size).map_err(|e| e.to_string())?;
    println!("PORT {}", service.port());
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    Ok(())
}

/// A `/proc/<pid>/status` field in KiB (or a count).
fn status_field(pid: u32, field: &str) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("reading /proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim_start_matches(':')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .ok_or_else(|| format!("no {field} in /proc/{pid}/status"))
}

fn service(ranks: usize) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args([SERVICE_CHILD, &ranks.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the service's process: {e}"))?;
    let pid = child.id();
    let mut line = String::new();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let port = line
        .trim()
        .strip_prefix("PORT ")
        .ok_or_else(|| format!("service said {line:?}"))?;
    let address = format!("127.0.0.1:{port}");
    let rss_before = status_field(pid, "VmRSS")?;
    let started = Instant::now();
    let clients: Vec<_> = (0..ranks)
        .map(|rank| {
            let address = address.clone();
            thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    let entry = format!("127.0.0.1:{}", 10_000 + rank);
                    exchange_entries(&address, SECRET, rank, ranks, 0, &entry, TIMEOUT)
                })
                .map_err(|e| format!("spawning client {rank}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let mut peak_threads = status_field(pid, "Threads")?;
    for client in clients {
        while !client.is_finished() {
            peak_threads = peak_threads.max(status_field(pid, "Threads").unwrap_or(0));
            thread::sleep(Duration::from_millis(5));
        }
        let entries = client
            .join()
            .map_err(|_| "a client panicked")?
            .map_err(|e| e.to_string())?;
        if entries.len() != ranks {
            return Err(format!("{} entries for {ranks} ranks", entries.len()));
        }
    }
    let elapsed = started.elapsed();
    let peak = status_field(pid, "VmHWM")?;
    drop(child.stdin.take());
    let _ = child.wait();
    row(
        "service_registrations",
        ranks,
        elapsed.as_secs_f64() * 1e3,
        "ms",
    );
    row("service_peak_rss", ranks, peak as f64, "KiB");
    row(
        "service_rss_growth",
        ranks,
        peak.saturating_sub(rss_before) as f64,
        "KiB",
    );
    row(
        "service_peak_threads",
        ranks,
        peak_threads as f64,
        "threads",
    );
    Ok(())
}

// ----------------------------------------------------------------------- join

fn count_entries(dir: &str) -> Result<usize, String> {
    Ok(std::fs::read_dir(dir)
        .map_err(|e| format!("reading {dir}: {e}"))?
        .count())
}

fn join(ranks: usize) -> Result<(), String> {
    let service =
        RendezvousService::start("127.0.0.1:0", SECRET, ranks).map_err(|e| e.to_string())?;
    let address = format!("127.0.0.1:{}", service.port());
    let (fds_before, tasks_before) = (
        count_entries("/proc/self/fd")?,
        count_entries("/proc/self/task")?,
    );
    // Ranks hold their engines until every rank has been counted.
    let joined = Arc::new(Barrier::new(ranks + 1));
    let counted = Arc::new(Barrier::new(ranks + 1));
    let started = Instant::now();
    let threads: Vec<_> = (0..ranks)
        .map(|rank| {
            let (address, joined, counted) = (address.clone(), joined.clone(), counted.clone());
            thread::spawn(move || -> Result<(Duration, Duration), String> {
                let spec = format!(
                    r#"{{"rank": {rank}, "size": {ranks},
                        "rendezvous": {{"service": {{"address": "{address}", "host": "127.0.0.1"}}}}}}"#
                );
                // A host each, as the ranks of a job across machines: no
                // shared memory, links as such a job opens them.
                let host = format!("host-{rank}");
                let result = join_json(
                    &spec,
                    |name| (name == "HOROVOD_HOSTNAME").then(|| host.clone()),
                    SECRET,
                    None,
                );
                let join_time = started.elapsed();
                joined.wait();
                counted.wait();
                let engine = result.map_err(|e| format!("rank {rank}: {e}"))?.engine;
                let before = Instant::now();
                let request = Request::from_elements(
                    "first",
                    Operation::allreduce(ReduceOp::Sum),
                    vec![1024],
                    &[1.0f32; 1024],
                );
                let mut handle = engine.submit(request).map_err(|e| e.to_string())?;
                handle.wait(TIMEOUT).map_err(|e| format!("rank {rank}: {e}"))?;
                Ok((join_time, before.elapsed()))
            })
        })
        .collect();
    joined.wait();
    let fds = count_entries("/proc/self/fd")?.saturating_sub(fds_before);
    let tasks = count_entries("/proc/self/task")?.saturating_sub(tasks_before);
    counted.wait();
    let mut join_time = Duration::ZERO;
    let mut allreduce = Duration::ZERO;
    for thread in threads {
        let (joined, reduced) = thread.join().map_err(|_| "a rank panicked")??;
        join_time = join_time.max(joined);
        allreduce = allreduce.max(reduced);
    }
    row("join", ranks, join_time.as_secs_f64() * 1e3, "ms");
    row("first_allreduce", ranks, micros(allreduce), "us");
    // The ranks' own threads (one each, counted above) are not the job's.
    row("fds_per_rank", ranks, fds as f64 / ranks as f64, "fds");
    row(
        "threads_per_rank",
        ranks,
        (tasks - ranks) as f64 / ranks as f64,
        "threads",
    );
    Ok(())
}

fn small_collectives(ranks: usize) -> Result<(), String> {
    let listeners = (0..ranks)
        .map(|_| Listener::bind("127.0.0.1:0").map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let addresses: Vec<String> = listeners
        .iter()
        .map(|l| format!("127.0.0.1:{}", l.port()))
        .collect();
    let config = CommConfig {
        transport: TransportPolicy::Tcp,
        ..CommConfig::default()
    };
    let threads: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, listener)| {
            let (addresses, config) = (addresses.clone(), config.clone());
            thread::spawn(move || -> Result<(f64, f64), String> {
                let mut comm = connect(listener, rank, &addresses, SECRET, &config)
                    .map_err(|e| format!("rank {rank}: {e}"))?;
                let mut value = [rank as f32];
                comm.broadcast(&mut value, 0).map_err(|e| e.to_string())?; // links warm
                let started = Instant::now();
                for _ in 0..BROADCASTS {
                    comm.broadcast(&mut value, 0).map_err(|e| e.to_string())?;
                }
                let broadcast = micros(started.elapsed()) / BROADCASTS as f64;
                let started = Instant::now();
                for _ in 0..BROADCASTS {
                    comm.allgather(&value).map_err(|e| e.to_string())?;
                }
                Ok((broadcast, micros(started.elapsed()) / BROADCASTS as f64))
            })
        })
        .collect();
    let (mut broadcasts, mut allgathers) = (Vec::new(), Vec::new());
    for thread in threads {
        let (broadcast, allgather) = thread.join().map_err(|_| "a rank panicked")??;
        broadcasts.push(broadcast);
        allgathers.push(allgather);
    }
    row("small_broadcast", ranks, median(broadcasts), "us");
    row("small_allgather", ranks, median(allgathers), "us");
    Ok(())
}
