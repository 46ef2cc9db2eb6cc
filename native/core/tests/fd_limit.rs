//! A job larger than the file-descriptor limit fails at join with a message
//! naming the limit, before any link opens. Each case lowers `RLIMIT_NOFILE`
//! in a child process (this test binary run again), since a lowered hard
//! limit cannot be raised back.

use std::process::Command;
use std::time::{Duration, Instant};

use horovod_core::{connect, CommConfig, Listener};

const CASE_VAR: &str = "HOROVOD_TEST_FD_CASE";

/// Runs `test` of this binary in a child with `CASE_VAR=case`; its output.
fn in_child(test: &str, case: &str) -> String {
    let output = Command::new(std::env::current_exe().expect("test binary path"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CASE_VAR, case)
        .output()
        .expect("run the child");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child {case} failed:\n{text}");
    text
}

fn set_limit(soft: u64, hard: u64) {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: a valid rlimit; only this child's limit changes.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
}

fn soft_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid, writable rlimit.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    limit.rlim_cur
}

/// Rank 0 of a `size`-rank job whose peers never come: past the check, it
/// would wait out the connect timeout.
fn join_as_rank_0(size: usize) -> Result<(), String> {
    let listener = Listener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addresses: Vec<String> = (0..size).map(|r| format!("127.0.0.1:{}", 1 + r)).collect();
    let config = CommConfig {
        connect_timeout: Duration::from_millis(300),
        ..CommConfig::default()
    };
    connect(listener, 0, &addresses, b"secret", &config)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[test]
fn fd_limit_child() {
    let Ok(case) = std::env::var(CASE_VAR) else {
        return; // Only runs as a child.
    };
    match case.as_str() {
        "hard" => {
            set_limit(64, 64);
            let started = Instant::now();
            let error = join_as_rank_0(200).expect_err("joined past the limit");
            println!("ERROR {error} AFTER_MS {}", started.elapsed().as_millis());
        }
        "soft" => {
            set_limit(64, 4096);
            let error = join_as_rank_0(200).expect_err("no peer came");
            println!("ERROR {error} SOFT {}", soft_limit());
        }
        other => panic!("unknown case {other}"),
    }
}

#[test]
fn a_job_past_the_hard_fd_limit_fails_at_join_naming_the_limit() {
    let out = in_child("fd_limit_child", "hard");
    let line = out.lines().find(|l| l.contains("ERROR ")).expect(&out);
    for words in [
        "a job of 200 ranks needs",
        "199 connections of the full mesh",
        "RLIMIT_NOFILE allows (soft 64, hard 64)",
        "ulimit -n",
        "Too many open files",
    ] {
        assert!(line.contains(words), "{words:?} not in {line}");
    }
    let after: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        after < 300,
        "failed after {after} ms, not before connecting: {line}"
    );
}

#[test]
fn a_soft_fd_limit_below_the_mesh_is_raised_to_the_hard_one() {
    let out = in_child("fd_limit_child", "soft");
    let line = out.lines().find(|l| l.contains("ERROR ")).expect(&out);
    assert!(line.contains("timed out"), "{line}");
    assert!(line.ends_with("SOFT 4096"), "{line}");
}
