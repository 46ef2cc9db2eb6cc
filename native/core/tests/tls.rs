//! Encrypted links (`HOROVOD_RS_TLS`): what travels is ciphertext, results
//! are the same, and ranks that disagree about encryption fail, named.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use horovod_core::{connect, CommConfig, Communicator, Listener, ReduceOp, TransportPolicy};

const SECRET: &[u8] = b"tls test secret";
/// A value whose bytes are easy to find in a capture.
const MARKER: f32 = 1234.5678;

fn config(tls: bool) -> CommConfig {
    CommConfig {
        connect_timeout: Duration::from_secs(20),
        io_timeout: Duration::from_secs(20),
        transport: TransportPolicy::Tcp,
        tls,
        hostname: None,
    }
}

/// Forwards one connection to `target` and records what rank 1 sends.
fn recording_proxy(target: String) -> (String, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    thread::spawn(move || {
        let (client, _) = listener.accept().unwrap();
        let server = TcpStream::connect(target).unwrap();
        let (mut client_in, mut server_out) =
            (client.try_clone().unwrap(), server.try_clone().unwrap());
        let upstream = thread::spawn(move || {
            let mut buf = [0u8; 64 << 10];
            while let Ok(n) = client_in.read(&mut buf) {
                // Recorded before it is forwarded: once rank 0 has the bytes, the test may
                // read the record.
                recorded.lock().unwrap().extend_from_slice(&buf[..n]);
                if n == 0 || server_out.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = server_out.shutdown(Shutdown::Write);
        });
        let (mut server_in, mut client_out) = (server, client);
        let _ = std::io::copy(&mut server_in, &mut client_out);
        let _ = client_out.shutdown(Shutdown::Write);
        upstream.join().unwrap();
    });
    (address, seen)
}

/// Two ranks where rank 1 reaches rank 0 through a recording proxy; each
/// allreduces `len` copies of [`MARKER`]. Returns rank 0's result and what
/// rank 1 sent on the wire.
fn allreduce_through_proxy(tls: bool, len: usize) -> (Vec<f32>, Vec<u8>) {
    let listener0 = Listener::bind("127.0.0.1:0").unwrap();
    let listener1 = Listener::bind("127.0.0.1:0").unwrap();
    let rank0 = format!("127.0.0.1:{}", listener0.port());
    let rank1 = format!("127.0.0.1:{}", listener1.port());
    let (proxy, seen) = recording_proxy(rank0.clone());
    let addresses0 = vec![rank0, rank1.clone()];
    let first = thread::spawn(move || {
        let mut comm = connect(listener0, 0, &addresses0, SECRET, &config(tls)).unwrap();
        let mut data = vec![MARKER; len];
        comm.allreduce(&mut data, ReduceOp::Sum).unwrap();
        data
    });
    let mut comm = connect(listener1, 1, &[proxy, rank1], SECRET, &config(tls)).unwrap();
    let mut data = vec![MARKER; len];
    comm.allreduce(&mut data, ReduceOp::Sum).unwrap();
    drop(comm);
    let result = first.join().unwrap();
    assert_eq!(data, result);
    let wire = seen.lock().unwrap().clone();
    (result, wire)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn encrypted_links_carry_no_plaintext_and_give_the_same_results() {
    let len = 300_000; // larger than a TLS record and than one send chunk
    let pattern: Vec<u8> = [MARKER; 4].iter().flat_map(|v| v.to_ne_bytes()).collect();

    let (plain, wire) = allreduce_through_proxy(false, len);
    assert!(
        contains(&wire, &pattern),
        "the check sees plaintext when there is some"
    );
    let (encrypted, wire) = allreduce_through_proxy(true, len);
    assert_eq!(encrypted, plain);
    assert_eq!(encrypted[0], MARKER * 2.0);
    assert!(
        wire.len() > len * 4,
        "rank 1 sent its data ({} bytes)",
        wire.len()
    );
    assert!(
        !contains(&wire, &pattern),
        "tensor bytes travelled in the clear"
    );
}

/// Rank 0 with `tls0`, rank 1 with the opposite: what each one's connect
/// says.
fn disagreeing(tls0: bool) -> (String, String) {
    let listener0 = Listener::bind("127.0.0.1:0").unwrap();
    let listener1 = Listener::bind("127.0.0.1:0").unwrap();
    let addresses = vec![
        format!("127.0.0.1:{}", listener0.port()),
        format!("127.0.0.1:{}", listener1.port()),
    ];
    let addresses0 = addresses.clone();
    let outcome = |comm: horovod_core::Result<Communicator>| match comm {
        Ok(_) => "connected".to_string(),
        Err(e) => e.to_string(),
    };
    let first =
        thread::spawn(move || outcome(connect(listener0, 0, &addresses0, SECRET, &config(tls0))));
    let second = outcome(connect(listener1, 1, &addresses, SECRET, &config(!tls0)));
    (first.join().unwrap(), second)
}

#[test]
fn ranks_that_disagree_about_encryption_both_fail_at_rendezvous_naming_the_setting() {
    for tls0 in [true, false] {
        let (rank0, rank1) = disagreeing(tls0);
        let on_off = |on: bool| if on { "on" } else { "off" };
        let expected0 = format!(
            "rank 1 disagrees with this rank: it has HOROVOD_RS_TLS {}, this rank {}",
            on_off(!tls0),
            on_off(tls0)
        );
        let expected1 = format!(
            "rank 0 disagrees with this rank: it has HOROVOD_RS_TLS {}, this rank {}",
            on_off(tls0),
            on_off(!tls0)
        );
        assert!(rank0.contains(&expected0), "{rank0}");
        assert!(rank1.contains(&expected1), "{rank1}");
    }
}
