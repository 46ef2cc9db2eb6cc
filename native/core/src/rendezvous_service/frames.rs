//! The rendezvous service's frames (the protocol is in the parent module's
//! docs): the register request and the replies, encoded and decoded, and
//! the socket settings both sides use.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Duration;

/// Longest entry a rank may register, in bytes.
pub(super) const MAX_ENTRY_LEN: usize = 64 * 1024;
/// Longest register request: the attempt number and an entry.
pub(super) const MAX_REQUEST_LEN: usize = 4 + MAX_ENTRY_LEN;
/// Reply status: every rank's entry follows.
pub(super) const ENTRIES: u8 = 0;
/// Reply status: the service refused the registration; a message follows.
pub(super) const REFUSED: u8 = 1;
/// Reply status: the rank registered again on another connection, which
/// replaced this one; a message follows.
pub(super) const SUPERSEDED: u8 = 2;

/// Blocking mode, `TCP_NODELAY`, and read and write timeouts of `timeout`.
pub(super) fn prepare(stream: &TcpStream, timeout: Duration) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))
}

/// Reads one frame's payload, refusing (`InvalidData`) one longer than `max`.
/// The buffer grows as bytes arrive, so a length prefix alone (a reply may
/// announce up to 4 GiB) allocates nothing.
pub(super) fn read_frame(reader: &mut impl Read, max: usize) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    reader.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes, more than the {max} expected"),
        ));
    }
    let mut payload = Vec::new();
    reader.by_ref().take(len as u64).read_to_end(&mut payload)?;
    if payload.len() < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the frame ends after {} of its {len} bytes", payload.len()),
        ));
    }
    Ok(payload)
}

/// Longest reply for a job of `size` ranks.
pub(super) fn max_reply_len(size: usize) -> usize {
    size.saturating_mul(4 + MAX_ENTRY_LEN)
        .saturating_add(1 + 4)
        .min(u32::MAX as usize)
}

/// The register request frame. `entry` is at most [`MAX_ENTRY_LEN`] bytes.
pub(super) fn encode_request(attempt: u32, entry: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + entry.len());
    out.extend_from_slice(&((4 + entry.len()) as u32).to_le_bytes());
    out.extend_from_slice(&attempt.to_le_bytes());
    out.extend_from_slice(entry.as_bytes());
    out
}

/// The attempt and entry of a register request's payload.
pub(super) fn decode_request(payload: &[u8]) -> std::result::Result<(u32, String), String> {
    let Some((attempt, entry)) = payload.split_first_chunk::<4>() else {
        return Err(format!(
            "a register request of {} bytes has no attempt number",
            payload.len()
        ));
    };
    if entry.len() > MAX_ENTRY_LEN {
        return Err(format!(
            "the entry is {} bytes, more than the {MAX_ENTRY_LEN} the service accepts",
            entry.len()
        ));
    }
    let entry = String::from_utf8(entry.to_vec()).map_err(|_| "the entry is not UTF-8")?;
    Ok((u32::from_le_bytes(*attempt), entry))
}

/// The reply frame carrying `entries`; None if it would not fit a frame.
pub(super) fn encode_entries(entries: &[String]) -> Option<Vec<u8>> {
    let len = entries
        .iter()
        .try_fold(1usize + 4, |len, entry| len.checked_add(4 + entry.len()))?;
    let frame_len = u32::try_from(len).ok()?;
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&frame_len.to_le_bytes());
    out.push(ENTRIES);
    // Both fit: each is below the frame length.
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for entry in entries {
        out.extend_from_slice(&(entry.len() as u32).to_le_bytes());
        out.extend_from_slice(entry.as_bytes());
    }
    Some(out)
}

/// A reply frame of `status` carrying a message.
pub(super) fn encode_message(status: u8, message: &str) -> Vec<u8> {
    // Messages are short texts of this module.
    let mut out = Vec::with_capacity(5 + message.len());
    out.extend_from_slice(&((1 + message.len()) as u32).to_le_bytes());
    out.push(status);
    out.extend_from_slice(message.as_bytes());
    out
}

/// What the service answered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Reply {
    /// Every rank's entry, in rank order.
    Entries(Vec<String>),
    /// The registration was refused, and why.
    Refused(String),
    /// Another registration of the same rank replaced this one.
    Superseded(String),
}

/// Parses a reply payload expected to carry `size` entries.
pub(super) fn decode_reply(payload: &[u8], size: usize) -> std::result::Result<Reply, String> {
    let Some((&status, mut rest)) = payload.split_first() else {
        return Err("an empty reply".into());
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    match status {
        ENTRIES => {}
        REFUSED => return Ok(Reply::Refused(text(rest))),
        SUPERSEDED => return Ok(Reply::Superseded(text(rest))),
        other => return Err(format!("unknown reply status {other}")),
    }
    let take_u32 = |rest: &mut &[u8]| {
        let (value, tail) = rest
            .split_first_chunk::<4>()
            .ok_or("the reply ends inside a length")?;
        *rest = tail;
        Ok::<usize, String>(u32::from_le_bytes(*value) as usize)
    };
    let count = take_u32(&mut rest)?;
    if count != size {
        return Err(format!("{count} entries for a job of {size} ranks"));
    }
    // Each entry takes at least its length: the count cannot reserve more
    // than the reply holds.
    if count > rest.len() / 4 {
        return Err(format!(
            "{count} entries cannot fit in the {} bytes left of the reply",
            rest.len()
        ));
    }
    let mut entries = Vec::with_capacity(count);
    for rank in 0..count {
        let len = take_u32(&mut rest)?;
        if len > rest.len() {
            return Err(format!("the entry of rank {rank} overruns the reply"));
        }
        let (entry, tail) = rest.split_at(len);
        rest = tail;
        let entry = String::from_utf8(entry.to_vec())
            .map_err(|_| format!("the entry of rank {rank} is not UTF-8"))?;
        entries.push(entry);
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes after the last entry", rest.len()));
    }
    Ok(Reply::Entries(entries))
}

/// Property tests: frames, requests and replies come straight off sockets.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use std::io::Cursor;

    /// A reader that remembers the largest buffer it was offered: a
    /// decoder that sizes its buffer by a length prefix shows here.
    struct Watched<'a> {
        inner: Cursor<&'a [u8]>,
        largest: usize,
    }

    impl Read for Watched<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.largest = self.largest.max(buf.len());
            self.inner.read(buf)
        }
    }

    /// Decoder errors are one of these, each naming what was wrong.
    fn is_named(error: &str) -> bool {
        [
            "has no attempt number",
            "more than the",
            "is not UTF-8",
            "an empty reply",
            "unknown reply status",
            "inside a length",
            "entries for a job of",
            "cannot fit in the",
            "overruns the reply",
            "bytes after the last entry",
        ]
        .iter()
        .any(|named| error.contains(named))
    }

    fn entry() -> impl Strategy<Value = String> {
        proptest::collection::vec(any::<char>(), 0..24).prop_map(|c| c.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_frame_bytes_are_read_or_refused(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            max in 0usize..80,
        ) {
            match read_frame(&mut Cursor::new(&bytes[..]), max) {
                Ok(payload) => {
                    prop_assert!(payload.len() <= max);
                    prop_assert_eq!(&bytes[4..4 + payload.len()], &payload[..]);
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    prop_assert!(e.to_string().contains("expected"), "{}", e);
                }
                Err(e) => prop_assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            }
        }

        #[test]
        fn a_huge_length_prefix_allocates_nothing(
            len in prop_oneof![Just(u32::MAX), any::<u32>()],
            tail in proptest::collection::vec(any::<u8>(), 0..32),
        ) {
            let mut frame = len.to_le_bytes().to_vec();
            frame.extend_from_slice(&tail);
            let mut reader = Watched { inner: Cursor::new(&frame[..]), largest: 0 };
            let result = read_frame(&mut reader, usize::MAX);
            if (len as usize) > tail.len() {
                let err = result.unwrap_err();
                prop_assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
                let named = format!("of its {len} bytes");
                prop_assert!(err.to_string().contains(&named), "{}", err);
            }
            prop_assert!(reader.largest <= 64 * 1024, "offered {} bytes", reader.largest);
        }

        #[test]
        fn any_request_decodes_or_is_named(payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            match decode_request(&payload) {
                Ok((attempt, entry)) => {
                    prop_assert_eq!(encode_request(attempt, &entry)[4..].to_vec(), payload);
                }
                Err(error) => prop_assert!(is_named(&error), "{}", error),
            }
        }

        #[test]
        fn requests_round_trip_and_truncations_fail(attempt in any::<u32>(), entry in entry()) {
            let frame = encode_request(attempt, &entry);
            let payload = read_frame(&mut Cursor::new(&frame[..]), MAX_REQUEST_LEN).unwrap();
            prop_assert_eq!(decode_request(&payload), Ok((attempt, entry)));
            for cut in 0..frame.len() {
                let err = read_frame(&mut Cursor::new(&frame[..cut]), MAX_REQUEST_LEN).unwrap_err();
                prop_assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
            }
            for cut in 0..4 {
                prop_assert!(decode_request(&payload[..cut]).is_err());
            }
        }

        #[test]
        fn any_reply_decodes_or_is_named(
            payload in proptest::collection::vec(any::<u8>(), 0..64),
            size in 0usize..6,
            count in prop_oneof![Just(None), Just(Some(u32::MAX)), (0..6u32).prop_map(Some)],
        ) {
            let mut payload = payload;
            // Most replies of interest list entries: give them a plausible count.
            if let (Some(count), Some(status)) = (count, payload.first_mut()) {
                *status = ENTRIES;
                payload.splice(1..1.min(payload.len()), count.to_le_bytes());
            }
            match decode_reply(&payload, size) {
                Ok(Reply::Entries(entries)) => prop_assert_eq!(entries.len(), size),
                Ok(_) => prop_assert!(payload[0] == REFUSED || payload[0] == SUPERSEDED),
                Err(error) => prop_assert!(is_named(&error), "{}", error),
            }
        }

        #[test]
        fn a_huge_entry_count_reserves_nothing(
            size in prop_oneof![Just(u32::MAX as usize), 17usize..=u32::MAX as usize],
            rest in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut payload = vec![ENTRIES];
            payload.extend_from_slice(&(size as u32).to_le_bytes());
            payload.extend_from_slice(&rest);
            let error = decode_reply(&payload, size).unwrap_err();
            prop_assert!(error.contains("cannot fit in the"), "{}", error);
        }

        #[test]
        fn replies_round_trip_and_truncations_fail(
            entries in proptest::collection::vec(entry(), 0..6),
        ) {
            let frame = encode_entries(&entries).unwrap();
            let max = max_reply_len(entries.len());
            let payload = read_frame(&mut Cursor::new(&frame[..]), max).unwrap();
            prop_assert_eq!(decode_reply(&payload, entries.len()), Ok(Reply::Entries(entries.clone())));
            for cut in 0..payload.len() {
                let error = decode_reply(&payload[..cut], entries.len()).unwrap_err();
                prop_assert!(is_named(&error), "{}", error);
            }
            for cut in 0..frame.len() {
                prop_assert!(read_frame(&mut Cursor::new(&frame[..cut]), max).is_err());
            }
        }

        #[test]
        fn messages_round_trip(status in prop_oneof![Just(REFUSED), Just(SUPERSEDED)], text in entry()) {
            let payload = read_frame(&mut Cursor::new(&encode_message(status, &text)[..]), usize::MAX).unwrap();
            let expected = if status == REFUSED { Reply::Refused(text) } else { Reply::Superseded(text) };
            prop_assert_eq!(decode_reply(&payload, 3), Ok(expected));
        }
    }
}
