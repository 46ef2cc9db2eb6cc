//! The driver's rendezvous service: gathers every rank's entry and sends each
//! rank the whole list, so the ranks learn each other's listener addresses.
//!
//! The Spark driver starts a [`RendezvousService`] before it submits the
//! barrier stage and gives the tasks its "host:port" and the job secret. Each
//! task calls [`exchange_entries`], which registers the task's entry (its
//! listener's "host:port", or an error text) and returns every rank's entry,
//! in rank order, as soon as the last rank has registered. The service does
//! not interpret entries.
//!
//! Each connection opens with the handshake of [`crate::handshake`] (client
//! C, a rank, connecting; service S accepting), the hellos marked with their
//! kind of endpoint ("service client", "service"), so neither can be mistaken
//! for a rank's listener, and the proofs kept apart from the mesh's. S's
//! hello carries its job size and rank 0. Step 4 is the registration:
//! C sends the register request, and S replies once every rank of C's stage
//! attempt has registered.
//!
//! Frames: a u32 length, then that many bytes (integers little-endian).
//! * Register request: the u32 stage attempt, then the entry (UTF-8, at most
//!   [`MAX_ENTRY_LEN`] bytes).
//! * Reply: a status byte, then for [`ENTRIES`] a u32 count and as many
//!   entries, each a u32 length and UTF-8 bytes; for [`REFUSED`] and
//!   [`SUPERSEDED`] a UTF-8 message.
//!
//! Spark reruns a failed barrier stage as a new stage attempt, so
//! registrations are grouped by attempt and each attempt gets its own list. A
//! rank registering again in an attempt replaces its earlier registration,
//! whose connection is told so and closed. Once an attempt's list is sent the
//! attempt is forgotten: a later registration for it starts a new round.
//!
//! Invariant: handshakes run on up to 16 threads with socket timeouts (a
//! registered connection waits for its reply without a thread, so the
//! service's threads do not grow with the job), and only authenticated
//! registrations reach the shared state; a connection that sends garbage,
//! stays silent, is of another kind or version or cannot prove the secret is
//! logged and dropped without affecting the others beyond the thread it holds
//! until its timeout. Dropping the service shuts every connection down, so
//! waiting ranks fail at once with `ServiceLost`.
//!
//! Where the driver cannot host it (a Spark Connect client), rank 0's task
//! does, on a port derived from the job's secret (`rank_zero`).
//!
//! Modules: `server` (the service), `client` (a rank's [`exchange_entries`]),
//! `frames` (the request and reply frames both speak), `rank_zero` (rank 0's
//! ports and service).

mod client;
mod frames;
mod rank_zero;
mod server;

pub use client::exchange_entries;
pub use rank_zero::{rank_zero_candidates, rank_zero_ports};
pub use server::RendezvousService;

#[cfg(test)]
mod tests {
    use super::client::*;
    use super::frames::*;
    use super::server::*;
    use crate::error::Error;
    use std::io;
    use std::time::Duration;

    fn payload(frame: &[u8]) -> Vec<u8> {
        read_frame(&mut &frame[..], usize::MAX).unwrap()
    }

    fn entries(of: &[&str]) -> Vec<String> {
        of.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn request_round_trips() {
        let frame = encode_request(7, "10.0.0.1:4000");
        assert_eq!(frame[..4], (4 + 13u32).to_le_bytes());
        assert_eq!(
            decode_request(&payload(&frame)),
            Ok((7, "10.0.0.1:4000".to_string()))
        );
        assert_eq!(
            decode_request(&payload(&encode_request(0, ""))),
            Ok((0, String::new()))
        );
    }

    #[test]
    fn malformed_requests_are_refused() {
        assert!(decode_request(&[1, 0]).is_err());
        assert!(decode_request(&[0, 0, 0, 0, 0xff]).is_err());
        let long = vec![b'a'; 4 + MAX_ENTRY_LEN + 1];
        let err = decode_request(&long).unwrap_err();
        assert!(err.contains("more than the 65536"), "{err}");
    }

    #[test]
    fn reply_round_trips() {
        let list = entries(&["h0:1", "!no listener: address in use", ""]);
        let frame = encode_entries(&list).unwrap();
        assert_eq!(
            decode_reply(&payload(&frame), 3),
            Ok(Reply::Entries(list.clone()))
        );
        let frame = encode_message(SUPERSEDED, "replaced");
        assert_eq!(
            decode_reply(&payload(&frame), 3),
            Ok(Reply::Superseded("replaced".into()))
        );
        let frame = encode_message(REFUSED, "no");
        assert_eq!(
            decode_reply(&payload(&frame), 1),
            Ok(Reply::Refused("no".into()))
        );
    }

    #[test]
    fn malformed_replies_are_named() {
        let good = payload(&encode_entries(&entries(&["a:1", "b:2"])).unwrap());
        let err = decode_reply(&good, 3).unwrap_err();
        assert_eq!(err, "2 entries for a job of 3 ranks");
        assert!(decode_reply(&good[..good.len() - 1], 2)
            .unwrap_err()
            .contains("overruns"));
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode_reply(&trailing, 2).unwrap_err().contains("after"));
        assert!(decode_reply(&good[..3], 2)
            .unwrap_err()
            .contains("inside a length"));
        assert!(decode_reply(&[], 2).is_err());
        assert_eq!(decode_reply(&[9], 2).unwrap_err(), "unknown reply status 9");
    }

    #[test]
    fn frame_length_is_bounded() {
        let frame = encode_request(0, "0123456789");
        let err = read_frame(&mut &frame[..], 8).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("14 bytes"), "{err}");
        assert_eq!(max_reply_len(2), 5 + 2 * (4 + MAX_ENTRY_LEN));
        assert_eq!(max_reply_len(usize::MAX), u32::MAX as usize);
    }

    /// The entries a reply carries, if it is a list.
    fn list(reply: &[u8]) -> Vec<String> {
        match decode_reply(&payload(reply), 2).unwrap() {
            Reply::Entries(entries) => entries,
            other => panic!("not a list: {other:?}"),
        }
    }

    #[test]
    fn attempts_are_kept_apart() {
        let mut rounds = Rounds::new(2);
        assert!(rounds.register(1, 0, 1, "a0-r1".into()).is_empty());
        assert!(rounds.register(2, 1, 0, "a1-r0".into()).is_empty());
        assert_eq!(rounds.missing(), vec![(0, vec![0]), (1, vec![1])]);
        let replies = rounds.register(3, 1, 1, "a1-r1".into());
        let ids: Vec<u64> = replies.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [2, 3]);
        assert_eq!(list(&replies[0].1), ["a1-r0", "a1-r1"]);
        let replies = rounds.register(4, 0, 0, "a0-r0".into());
        let ids: Vec<u64> = replies.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [4, 1]);
        assert_eq!(list(&replies[1].1), ["a0-r0", "a0-r1"]);
        assert!(rounds.missing().is_empty());
        // A completed attempt is forgotten: registering again starts anew.
        assert!(rounds.register(5, 0, 0, "again".into()).is_empty());
        assert_eq!(rounds.missing(), vec![(0, vec![1])]);
    }

    #[test]
    fn registering_again_replaces_the_earlier_registration() {
        let mut rounds = Rounds::new(2);
        assert!(rounds.register(1, 0, 0, "old".into()).is_empty());
        let replies = rounds.register(2, 0, 0, "new".into());
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].0, 1);
        match decode_reply(&payload(&replies[0].1), 2).unwrap() {
            Reply::Superseded(message) => assert_eq!(
                message,
                "rank 0 registered again for stage attempt 0, replacing this registration"
            ),
            other => panic!("{other:?}"),
        }
        let replies = rounds.register(3, 0, 1, "b".into());
        let ids: Vec<u64> = replies.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [2, 3]);
        assert_eq!(list(&replies[0].1), ["new", "b"]);
    }

    #[test]
    fn invalid_arguments_are_refused() {
        /// Address, secret, rank, size, entry, timeout.
        type Case = (&'static str, &'static [u8], usize, usize, String, Duration);
        let second = Duration::from_secs(1);
        let cases: [Case; 7] = [
            ("h:1", b"s", 0, 0, String::new(), second),
            ("h:1", b"s", 2, 2, String::new(), second),
            ("nocolon", b"s", 0, 1, String::new(), second),
            ("h:0", b"s", 0, 1, String::new(), second),
            ("h:1", b"s", 0, 1, "x".repeat(MAX_ENTRY_LEN + 1), second),
            ("h:1", b"s", 0, 1, String::new(), Duration::ZERO),
            ("h:1", b"", 0, 1, String::new(), second),
        ];
        for (address, secret, rank, size, entry, timeout) in cases {
            let err =
                exchange_entries(address, secret, rank, size, 0, &entry, timeout).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{address}: {err}");
        }
        let err = exchange_entries("h:1", b"s", 0, 1, 0, &"x".repeat(70_000), second).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid argument: the entry of rank 0 is 70000 bytes, more than the 65536 the rendezvous service accepts"
        );
        for (secret, size) in [(&b""[..], 1), (b"s", 0)] {
            let err = RendezvousService::start("127.0.0.1:0", secret, size).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        }
        let err = RendezvousService::start("not an address", b"s", 1).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }

    #[test]
    fn registrations_wait_for_their_list_without_a_thread_each() {
        const SIZE: usize = 100;
        let secret = b"driver-secret";
        let service = RendezvousService::start("127.0.0.1:0", secret, SIZE).unwrap();
        let address = format!("127.0.0.1:{}", service.port());
        let register = |rank: usize| {
            let address = address.clone();
            std::thread::spawn(move || {
                let entry = format!("h{rank}:1");
                exchange_entries(
                    &address,
                    secret,
                    rank,
                    SIZE,
                    0,
                    &entry,
                    Duration::from_secs(120),
                )
            })
        };
        let early: Vec<_> = (1..SIZE).map(register).collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while service.waiting_and_threads().0 < SIZE - 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "ranks did not register"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let (_, threads) = service.waiting_and_threads();
        assert!((1..=16).contains(&threads), "{threads} handshake threads");
        let last = register(0).join().unwrap().unwrap();
        assert_eq!(last.len(), SIZE);
        assert_eq!(last[7], "h7:1");
        for handle in early {
            assert_eq!(handle.join().unwrap().unwrap(), last);
        }
        assert_eq!(service.waiting_and_threads().0, 0);
    }

    #[test]
    fn service_can_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<RendezvousService>();
    }
}
