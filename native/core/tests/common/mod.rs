//! Runs jobs of real rank processes on 127.0.0.1.
//!
//! The test binary re-executes itself once per rank, running only its
//! `child_entry` test with `HVD_TEST_CHILD_RANK` set. A child binds its own
//! listener, prints its port, reads the comma-separated address list from its
//! stdin, connects, and then plays its scenario. Children talk to the parent
//! with stdout lines prefixed `HVD:` (libtest's own lines are ignored).
//!
//! Every wait has a bound, and a `Job` kills its remaining children when
//! dropped, so a failing test never leaves processes or hangs.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use horovod_core::{connect, CommConfig, Communicator, Error, Listener, TransportPolicy};

const RANK_VAR: &str = "HVD_TEST_CHILD_RANK";
const SCENARIO_VAR: &str = "HVD_TEST_SCENARIO";
const SECRET_VAR: &str = "HVD_TEST_SECRET";
const CONNECT_MS_VAR: &str = "HVD_TEST_CONNECT_MS";
const IO_MS_VAR: &str = "HVD_TEST_IO_MS";
/// "tcp" forces TCP; anything else (or unset) leaves `TransportPolicy::Auto`.
pub const TRANSPORT_VAR: &str = "HVD_TEST_TRANSPORT";
const PREFIX: &str = "HVD:";

/// The secret ranks use unless a test gives one another.
pub const SECRET: &str = "job-secret-0123456789";

// ------------------------------------------------------------------- parent

/// How to start one rank.
#[derive(Clone, Debug)]
pub struct RankSpec {
    pub secret: String,
    pub connect_ms: u64,
    pub io_ms: u64,
    /// Extra environment variables for the scenario.
    pub env: Vec<(String, String)>,
}

impl Default for RankSpec {
    fn default() -> Self {
        RankSpec {
            secret: SECRET.into(),
            connect_ms: 20_000,
            io_ms: 30_000,
            env: Vec::new(),
        }
    }
}

impl RankSpec {
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        self.env.push((key.into(), value.to_string()));
        self
    }
}

struct RankProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Lines received so far, for failure messages.
    seen: Vec<String>,
    port: u16,
}

/// The rank processes of one job.
pub struct Job {
    scenario: String,
    ranks: Vec<RankProcess>,
}

impl Job {
    /// Starts one process per spec and waits for each to report its port.
    pub fn start(scenario: &str, specs: Vec<RankSpec>) -> Job {
        let exe = std::env::current_exe().expect("test binary path");
        let mut ranks = Vec::new();
        for (rank, spec) in specs.into_iter().enumerate() {
            let mut command = Command::new(&exe);
            command
                .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
                .env(RANK_VAR, rank.to_string())
                .env(SCENARIO_VAR, scenario)
                .env(SECRET_VAR, &spec.secret)
                .env(CONNECT_MS_VAR, spec.connect_ms.to_string())
                .env(IO_MS_VAR, spec.io_ms.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            for (key, value) in &spec.env {
                command.env(key, value);
            }
            let mut child = command.spawn().expect("spawn rank process");
            let stdin = child.stdin.take();
            let stdout = child.stdout.take().expect("child stdout");
            let (tx, rx) = mpsc::channel();
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    // libtest may have begun the line with "test child_entry ... ".
                    if let Some(at) = line.find(PREFIX) {
                        if tx.send(line[at + PREFIX.len()..].to_string()).is_err() {
                            break;
                        }
                    }
                }
            });
            ranks.push(RankProcess {
                child,
                stdin,
                lines: rx,
                seen: Vec::new(),
                port: 0,
            });
        }
        let mut job = Job {
            scenario: scenario.into(),
            ranks,
        };
        for rank in 0..job.ranks.len() {
            let line = job.expect(rank, "PORT ", Duration::from_secs(30));
            job.ranks[rank].port = line["PORT ".len()..].trim().parse().expect("port number");
        }
        job
    }

    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    pub fn port(&self, rank: usize) -> u16 {
        self.ranks[rank].port
    }

    /// The genuine address list.
    pub fn addresses(&self) -> Vec<String> {
        self.ranks
            .iter()
            .map(|r| format!("127.0.0.1:{}", r.port))
            .collect()
    }

    /// Gives `rank` its address list, which starts its rendezvous.
    pub fn send_addresses(&mut self, rank: usize, addresses: &[String]) {
        let mut stdin = self.ranks[rank].stdin.take().expect("addresses sent once");
        writeln!(stdin, "{}", addresses.join(",")).expect("write addresses");
    }

    /// Gives every rank the address list with rank `r` on host `hosts[r]`:
    /// names that all reach this machine but group ranks into "hosts" as
    /// the transports see them (e.g. `127.0.0.1` and `localhost`).
    pub fn send_all_on_hosts(&mut self, hosts: &[&str]) {
        let addresses: Vec<String> = self
            .addresses()
            .iter()
            .zip(hosts)
            .map(|(address, host)| address.replacen("127.0.0.1", host, 1))
            .collect();
        for rank in 0..self.size() {
            self.send_addresses(rank, &addresses);
        }
    }

    /// Gives every rank the genuine address list.
    pub fn send_all(&mut self) {
        let addresses = self.addresses();
        for rank in 0..self.size() {
            self.send_addresses(rank, &addresses);
        }
    }

    /// The next line of `rank`, or None after `timeout` or when it exited.
    pub fn next_line(&mut self, rank: usize, timeout: Duration) -> Option<String> {
        match self.ranks[rank].lines.recv_timeout(timeout) {
            Ok(line) => {
                self.ranks[rank].seen.push(line.clone());
                Some(line)
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Waits for a line of `rank` starting with `prefix`, skipping others.
    pub fn expect(&mut self, rank: usize, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_line(rank, left) {
                Some(line) if line.starts_with(prefix) => return line,
                Some(_) => {}
                None => panic!(
                    "{}: rank {rank} sent no {prefix:?} line within {timeout:?}; lines so far: {:?}",
                    self.scenario, self.ranks[rank].seen
                ),
            }
        }
    }

    /// Kills `rank` (SIGKILL) and reaps it.
    pub fn kill(&mut self, rank: usize) {
        let child = &mut self.ranks[rank].child;
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits for every rank to exit successfully and returns each one's lines
    /// (those not consumed yet). Panics, killing the job, if one fails or is
    /// still running after `timeout`.
    pub fn finish(mut self, timeout: Duration) -> Vec<Vec<String>> {
        let deadline = Instant::now() + timeout;
        let mut outputs = Vec::new();
        for rank in 0..self.size() {
            let mut lines = Vec::new();
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match self.ranks[rank].lines.recv_timeout(left) {
                    Ok(line) => lines.push(line),
                    Err(RecvTimeoutError::Disconnected) => break,
                    Err(RecvTimeoutError::Timeout) => panic!(
                        "{}: rank {rank} still running after {timeout:?}; lines: {:?}",
                        self.scenario, lines
                    ),
                }
            }
            let status = self.ranks[rank].child.wait().expect("wait for rank");
            assert!(
                status.success(),
                "{}: rank {rank} exited with {status}; lines: {lines:?}",
                self.scenario
            );
            outputs.push(lines);
        }
        outputs
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        for rank in &mut self.ranks {
            if let Ok(None) = rank.child.try_wait() {
                let _ = rank.child.kill();
                let _ = rank.child.wait();
            }
        }
    }
}

/// Runs `scenario` on `size` ranks with the defaults and requires every
/// rank's last line to start with "OK".
pub fn run_all_ok(scenario: &str, size: usize) {
    let mut job = Job::start(scenario, specs(size));
    job.send_all();
    for (rank, lines) in job.finish(Duration::from_secs(120)).iter().enumerate() {
        assert!(
            lines.last().is_some_and(|l| l.starts_with("OK")),
            "{scenario}: rank {rank} of {size}: {lines:?}"
        );
    }
}

/// Specs for `size` ranks with the defaults.
pub fn specs(size: usize) -> Vec<RankSpec> {
    vec![RankSpec::default(); size]
}

/// Splits an "ERR <kind> <message>" line.
pub fn parse_err(line: &str) -> (&str, &str) {
    let rest = line
        .strip_prefix("ERR ")
        .unwrap_or_else(|| panic!("not an error line: {line}"));
    rest.split_once(' ').unwrap_or((rest, ""))
}

// -------------------------------------------------------------------- child

/// This process's rank when it runs as a child of a test.
pub fn child_rank() -> Option<usize> {
    std::env::var(RANK_VAR).ok()?.parse().ok()
}

pub fn scenario() -> String {
    std::env::var(SCENARIO_VAR).unwrap_or_default()
}

/// A scenario parameter.
pub fn var(key: &str) -> Option<String> {
    std::env::var(key).ok()
}

/// Sends a line to the parent.
pub fn say(line: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{PREFIX}{line}");
    let _ = out.flush();
}

/// The secret the parent gave this rank.
pub fn secret() -> String {
    var(SECRET_VAR).unwrap_or_default()
}

fn env_ms(key: &str) -> Duration {
    Duration::from_millis(var(key).and_then(|v| v.parse().ok()).unwrap_or(10_000))
}

pub fn config() -> CommConfig {
    CommConfig {
        connect_timeout: env_ms(CONNECT_MS_VAR),
        io_timeout: env_ms(IO_MS_VAR),
        transport: match var(TRANSPORT_VAR).as_deref() {
            Some("tcp") => TransportPolicy::Tcp,
            Some("flat") => TransportPolicy::Flat,
            _ => TransportPolicy::Auto,
        },
        // The whole matrix runs encrypted under HOROVOD_RS_TLS=1.
        tls: horovod_core::tls_setting(var(horovod_core::TLS_VARIABLE).as_deref()).unwrap(),
        hostname: None,
    }
}

/// Binds, reports the port, reads the addresses, connects. Returns the
/// communicator (or error) and how long `connect` took.
pub fn rendezvous(rank: usize) -> (Result<Communicator, Error>, Duration) {
    let listener = Listener::bind("127.0.0.1:0").expect("bind");
    say(format!("PORT {}", listener.port()));
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("read addresses");
    let addresses: Vec<String> = line.trim().split(',').map(String::from).collect();
    let secret = secret();
    let started = Instant::now();
    let result = connect(listener, rank, &addresses, secret.as_bytes(), &config());
    (result, started.elapsed())
}

/// In a child process, rendezvous and return the communicator; `None` in
/// the parent, or after reporting a failed rendezvous to it.
pub fn connected_child() -> Option<Communicator> {
    let rank = child_rank()?;
    match rendezvous(rank) {
        (Ok(comm), _) => Some(comm),
        (Err(e), _) => {
            say_err(&e);
            None
        }
    }
}

/// Variant name of an error, for "ERR <kind> <message>" lines.
pub fn kind(error: &Error) -> &'static str {
    match error {
        Error::Io { .. } => "Io",
        Error::PeerLost { .. } => "PeerLost",
        Error::Timeout { .. } => "Timeout",
        Error::AuthFailed { .. } => "AuthFailed",
        Error::VersionMismatch { .. } => "VersionMismatch",
        Error::Mismatch { .. } => "Mismatch",
        Error::InvalidArgument(_) => "InvalidArgument",
        Error::Unusable { .. } => "Unusable",
        Error::ServiceLost { .. } => "ServiceLost",
        Error::TensorMismatch { .. } => "TensorMismatch",
        Error::Stalled { .. } => "Stalled",
        Error::DuplicateName { .. } => "DuplicateName",
        Error::EngineStopped { .. } => "EngineStopped",
        Error::Unsupported { .. } => "Unsupported",
        Error::ControlMessage { .. } => "ControlMessage",
        Error::NoCudaSupport => "NoCudaSupport",
        Error::NcclUnavailable { .. } => "NcclUnavailable",
        Error::Nccl { .. } => "Nccl",
    }
}

pub fn say_err(error: &Error) {
    say(format!("ERR {} {error}", kind(error)));
}

/// Names of shared memory segments of horovod-rs present in `/dev/shm`.
pub fn shm_segments() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with("horovod-rs-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Panics unless `/dev/shm` holds no horovod-rs segment within a few seconds
/// (tests running concurrently own segments only while they connect).
pub fn assert_no_shm_leftovers() {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = shm_segments();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "segments left in /dev/shm: {left:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}
