//! `horovod-bench`: allreduce bandwidth and latency of horovod-rs, measured
//! the way the peer benchmarks (`../shared/bench/peers/`) measure Open MPI and
//! Gloo, so the CSVs sit side by side.
//!
//! Every rank is a separate OS process on 127.0.0.1: the parent re-executes
//! this binary once per rank, runs a [`RendezvousService`] for the address
//! exchange, and forwards rank 0's CSV lines to its stdout.
//!
//! The measurement rules are the peers' and must stay so: f32 SUM of the
//! sizes in [`SIZES`]; per size two warm-up allreduces, a barrier, then
//! `clamp(2e8 / bytes, 3, 200)` timed allreduces; rank 0 reports the mean
//! time per allreduce and the bus bandwidth `2 (n - 1) / n * bytes / seconds`
//! (as nccl-tests defines it). Like `mpirun`, which binds its ranks to one
//! core each by default when they are no more than the cores (and does not
//! bind them otherwise), each rank then binds itself to a core of its own;
//! `HOROVOD_BENCH_BIND=0` leaves them unbound.
//!
//! Usage: `horovod-bench [RANKS...]` (default `2 3 4`); the environment
//! variable `HOROVOD_BENCH_TRANSPORTS` (default `auto,tcp,hier`) picks which
//! transports run: `auto` (shared memory on one host), `tcp` (forced), and
//! `hier`, which gives the second half of the ranks another host name for
//! this machine (`localhost` instead of `127.0.0.1`), so the job looks like
//! two hosts: shared memory within each half, TCP between them (the
//! hierarchical allreduce of multi-host jobs). With `HOROVOD_RS_TLS=1` the
//! links are encrypted and the names end in `-tls`. Output:
//! `impl,ranks,bytes,seconds,busbw_gbps`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use horovod_core::{
    connect, exchange_entries, CommConfig, Listener, ReduceOp, RendezvousService, TransportPolicy,
    TLS_VARIABLE,
};

/// Message sizes in bytes, those of the peer benchmarks.
const SIZES: [usize; 6] = [4, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20];
/// Secret of the benchmark's jobs (loopback only).
const SECRET: &[u8] = b"horovod-bench";
const TIMEOUT: Duration = Duration::from_secs(120);

/// Environment of a rank process.
const RANK_VAR: &str = "HOROVOD_BENCH_RANK";
const SIZE_VAR: &str = "HOROVOD_BENCH_SIZE";
const SERVICE_VAR: &str = "HOROVOD_BENCH_SERVICE";
const TRANSPORT_VAR: &str = "HOROVOD_BENCH_TRANSPORT";

fn main() -> ExitCode {
    let result = match std::env::var(RANK_VAR) {
        Ok(rank) => run_rank(&rank),
        Err(_) => run_parent(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("horovod-bench: {message}");
            ExitCode::FAILURE
        }
    }
}

/// How a job's ranks talk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Shared memory: every rank on one host.
    Shm,
    /// TCP between every pair, forced.
    Tcp,
    /// Two host names: shared memory within each, TCP between.
    Hier,
}

impl Mode {
    fn parse(name: &str) -> Result<Mode, String> {
        match name.trim() {
            "auto" => Ok(Mode::Shm),
            "tcp" => Ok(Mode::Tcp),
            "hier" => Ok(Mode::Hier),
            other => Err(format!("unknown transport {other:?} (auto, tcp or hier)")),
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Mode::Shm => "auto",
            Mode::Tcp => "tcp",
            Mode::Hier => "hier",
        }
    }

    /// The name in the CSV's `impl` column.
    fn impl_name(self) -> &'static str {
        match self {
            Mode::Shm => "horovod-rs",
            Mode::Tcp => "horovod-rs-tcp",
            Mode::Hier => "horovod-rs-hier",
        }
    }

    /// The host name rank `rank` of `size` advertises.
    fn host(self, rank: usize, size: usize) -> &'static str {
        if self == Mode::Hier && rank >= size / 2 {
            "localhost"
        } else {
            "127.0.0.1"
        }
    }
}

fn run_parent() -> Result<(), String> {
    let ranks: Vec<usize> = match std::env::args().skip(1).collect::<Vec<_>>() {
        args if args.is_empty() => vec![2, 3, 4],
        args => args
            .iter()
            .map(|a| a.parse().map_err(|_| format!("not a rank count: {a}")))
            .collect::<Result<_, _>>()?,
    };
    let modes =
        std::env::var("HOROVOD_BENCH_TRANSPORTS").unwrap_or_else(|_| "auto,tcp,hier".into());
    let modes: Vec<Mode> = modes
        .split(',')
        .map(Mode::parse)
        .collect::<Result<_, _>>()?;
    println!("impl,ranks,bytes,seconds,busbw_gbps");
    for &size in &ranks {
        for &mode in &modes {
            // With fewer than 4 ranks, two halves hold one rank each at most
            // on one side: nothing to share, so no hierarchy.
            if mode != Mode::Hier || size >= 4 {
                run_job(size, mode)?;
            }
        }
    }
    Ok(())
}

/// Runs one job of `size` rank processes and forwards rank 0's CSV lines.
fn run_job(size: usize, mode: Mode) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let service = RendezvousService::start("127.0.0.1:0", SECRET, size)
        .map_err(|e| format!("starting the rendezvous service: {e}"))?;
    let mut children = Vec::new();
    for rank in 0..size {
        let child = Command::new(&exe)
            .env(RANK_VAR, rank.to_string())
            .env(SIZE_VAR, size.to_string())
            .env(SERVICE_VAR, format!("127.0.0.1:{}", service.port()))
            .env(TRANSPORT_VAR, mode.arg())
            .stdout(if rank == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawning rank {rank}: {e}"))?;
        children.push(child);
    }
    if let Some(stdout) = children[0].stdout.take() {
        let mut out = std::io::stdout().lock();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
    let mut failed = Vec::new();
    for (rank, mut child) in children.into_iter().enumerate() {
        match child.wait() {
            Ok(status) if status.success() => {}
            Ok(status) => failed.push(format!("rank {rank} exited with {status}")),
            Err(e) => failed.push(format!("rank {rank}: {e}")),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} with {size} ranks: {}",
            mode.impl_name(),
            failed.join(", ")
        ))
    }
}

/// Binds this process to the `rank`-th core it may run on, when the `size`
/// ranks fit one per core, as `mpirun` does by default. The peers' Open MPI
/// figures are measured so; unbound, the scheduler now and then keeps two
/// ranks on one core for a while, and a run measures that instead.
fn bind_like_mpirun(rank: usize, size: usize) -> Result<(), String> {
    let set_size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `cpu_set_t` is plain data, valid when zeroed; both calls are
    // given its true size, and the CPU_* helpers stay within it.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, set_size, &mut allowed) != 0 {
            return Err(format!(
                "rank {rank}: reading its cores: {}",
                std::io::Error::last_os_error()
            ));
        }
        let cores: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&core| libc::CPU_ISSET(core, &allowed))
            .collect();
        if size > cores.len() {
            return Ok(());
        }
        let mut mine: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cores[rank], &mut mine);
        if libc::sched_setaffinity(0, set_size, &mine) != 0 {
            return Err(format!(
                "rank {rank}: binding to core {}: {}",
                cores[rank],
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

fn env(key: &str) -> Result<String, String> {
    std::env::var(key).map_err(|_| format!("{key} is not set"))
}

fn run_rank(rank: &str) -> Result<(), String> {
    let rank: usize = rank.parse().map_err(|_| format!("bad rank {rank:?}"))?;
    let size: usize = env(SIZE_VAR)?
        .parse()
        .map_err(|_| "bad job size".to_string())?;
    let service = env(SERVICE_VAR)?;
    let mode = Mode::parse(&env(TRANSPORT_VAR)?)?;
    let listener = Listener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let entry = format!("{}:{}", mode.host(rank, size), listener.port());
    let addresses = exchange_entries(&service, SECRET, rank, size, 0, &entry, TIMEOUT)
        .map_err(|e| format!("rank {rank}: {e}"))?;
    let config = CommConfig {
        connect_timeout: TIMEOUT,
        io_timeout: TIMEOUT,
        transport: if mode == Mode::Tcp {
            TransportPolicy::Tcp
        } else {
            TransportPolicy::Auto
        },
        tls: horovod_core::tls_setting(std::env::var(TLS_VARIABLE).ok().as_deref())
            .map_err(|e| e.to_string())?,
        hostname: None,
    };
    let mut comm = connect(listener, rank, &addresses, SECRET, &config)
        .map_err(|e| format!("rank {rank}: {e}"))?;
    if mode == Mode::Hier && !comm.is_hierarchical() {
        return Err(format!("rank {rank}: the two-host job is not hierarchical"));
    }
    // After connecting: the transport judges from the cores this process may
    // use whether its ranks can busy-wait, and a bound rank may use one.
    if std::env::var("HOROVOD_BENCH_BIND").as_deref() != Ok("0") {
        bind_like_mpirun(rank, size)?;
    }
    let name = if config.tls {
        format!("{}-tls", mode.impl_name())
    } else {
        mode.impl_name().to_string()
    };
    for bytes in SIZES {
        let count = (bytes / 4).max(1);
        let mut data = vec![1.0f32; count];
        let iterations = (2e8 / bytes as f64).clamp(3.0, 200.0) as usize;
        let fail = |e: horovod_core::Error| format!("rank {rank}, {bytes} bytes: {e}");
        for _ in 0..2 {
            comm.allreduce(&mut data, ReduceOp::Sum).map_err(fail)?;
        }
        comm.barrier().map_err(fail)?;
        let started = Instant::now();
        for _ in 0..iterations {
            comm.allreduce(&mut data, ReduceOp::Sum).map_err(fail)?;
        }
        let seconds = started.elapsed().as_secs_f64() / iterations as f64;
        if rank == 0 {
            let busbw = 2.0 * (size - 1) as f64 / size as f64 * bytes as f64 / seconds / 1e9;
            println!("{name},{size},{bytes},{seconds:.6e},{busbw:.3}");
        }
    }
    Ok(())
}
