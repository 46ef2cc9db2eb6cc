//! The byte layout of checkpoints and saved models: a JSON header (metadata
//! and the names and lengths of the arrays) followed by the arrays as
//! little-endian `f32`, then a CRC-32 of everything before it.
//! Self-describing, so a reader checks what it loads; the checksum catches
//! a file damaged after it was written (storage, a partial copy), which a
//! structurally valid file would otherwise hide.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Files written since the checksum: magic, header, arrays, CRC-32.
const MAGIC: &[u8; 8] = b"HVRSBLB2";
/// Files written before it (no checksum), still read.
const MAGIC_UNCHECKED: &[u8; 8] = b"HVRSBLOB";

#[derive(Serialize, Deserialize)]
struct Header {
    meta: serde_json::Value,
    arrays: Vec<(String, usize)>,
}

/// Writes `meta` and `arrays` into one buffer.
pub fn encode(meta: serde_json::Value, arrays: &[(String, &[f32])]) -> Vec<u8> {
    let header = Header {
        meta,
        arrays: arrays.iter().map(|(n, a)| (n.clone(), a.len())).collect(),
    };
    let header = serde_json::to_vec(&header).expect("a header always serialises");
    let values: usize = arrays.iter().map(|(_, a)| a.len()).sum();
    let mut out = Vec::with_capacity(16 + header.len() + 4 * values + 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for (_, array) in arrays {
        for v in array.iter() {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    let checksum = crc32fast::hash(&out);
    out.extend_from_slice(&checksum.to_le_bytes());
    out
}

/// Named `f32` arrays, in the order they were written.
pub type Arrays = Vec<(String, Vec<f32>)>;

/// Reads what [`encode`] wrote.
pub fn decode(bytes: &[u8]) -> Result<(serde_json::Value, Arrays)> {
    let bad = |what: &str| Error::Checkpoint(what.to_string());
    let bytes = match bytes.get(..8) {
        Some(magic) if magic == MAGIC => checked(bytes)?,
        Some(magic) if magic == MAGIC_UNCHECKED => bytes,
        _ => {
            return Err(bad(
                "not a horovod-rs checkpoint or model (wrong magic bytes)",
            ))
        }
    };
    if bytes.len() < 16 {
        return Err(bad("truncated header"));
    }
    let header_len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")) as usize;
    let body = bytes
        .get(16..16usize.saturating_add(header_len))
        .ok_or_else(|| bad("truncated header"))?;
    let header: Header =
        serde_json::from_slice(body).map_err(|e| Error::Checkpoint(format!("bad header: {e}")))?;
    let mut offset = 16 + header_len;
    let mut arrays = Vec::with_capacity(header.arrays.len());
    for (name, len) in header.arrays {
        let end = len
            .checked_mul(4)
            .and_then(|n| offset.checked_add(n))
            .filter(|&e| e <= bytes.len());
        let end = end.ok_or_else(|| Error::Checkpoint(format!("truncated array '{name}'")))?;
        let values = bytes[offset..end]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        arrays.push((name, values));
        offset = end;
    }
    if offset != bytes.len() {
        return Err(bad("trailing bytes after the last array"));
    }
    Ok((header.meta, arrays))
}

/// `bytes` without their trailing CRC-32, once it matches.
fn checked(bytes: &[u8]) -> Result<&[u8]> {
    let split = bytes
        .len()
        .checked_sub(4)
        .filter(|&n| n >= 16)
        .ok_or_else(|| Error::Checkpoint("truncated header".into()))?;
    let (body, stored) = bytes.split_at(split);
    let stored = u32::from_le_bytes(stored.try_into().expect("4 bytes"));
    let actual = crc32fast::hash(body);
    if stored != actual {
        return Err(Error::Checkpoint(format!(
            "checksum mismatch (stored {stored:08x}, computed {actual:08x}): the file was damaged or cut off after it was written"
        )));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let bytes = encode(
            serde_json::json!({"epochs": 2}),
            &[("a".into(), &[1.0, -2.5][..]), ("b".into(), &[][..])],
        );
        let (meta, arrays) = decode(&bytes).unwrap();
        assert_eq!(meta["epochs"], 2);
        assert_eq!(
            arrays,
            vec![
                ("a".to_string(), vec![1.0, -2.5]),
                ("b".to_string(), vec![])
            ]
        );
        assert!(decode(&bytes[..bytes.len() - 1])
            .unwrap_err()
            .to_string()
            .contains("checksum mismatch"));
        let mut flipped = bytes.clone();
        let last_value = flipped.len() - 5;
        flipped[last_value] ^= 0x40;
        assert!(decode(&flipped)
            .unwrap_err()
            .to_string()
            .contains("checksum mismatch"));
        assert!(decode(b"garbage garbage!")
            .unwrap_err()
            .to_string()
            .contains("magic"));
    }

    #[test]
    fn reads_files_written_before_the_checksum() {
        // The earlier layout: the same bytes, the old magic, no trailer.
        let bytes = encode(serde_json::json!({"v": 1}), &[("w".into(), &[0.5][..])]);
        let mut old = bytes[..bytes.len() - 4].to_vec();
        old[..8].copy_from_slice(MAGIC_UNCHECKED);
        let (meta, arrays) = decode(&old).unwrap();
        assert_eq!(meta["v"], 1);
        assert_eq!(arrays, vec![("w".to_string(), vec![0.5])]);
        assert!(decode(&old[..old.len() - 1])
            .unwrap_err()
            .to_string()
            .contains("truncated array 'w'"));
    }
}

/// Property tests: checkpoints and saved models are read from files.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// The error is a checkpoint error saying what was wrong.
    fn named(
        result: Result<(serde_json::Value, Arrays)>,
    ) -> std::result::Result<(), TestCaseError> {
        if let Err(error) = result {
            prop_assert!(matches!(error, Error::Checkpoint(_)), "{}", error);
            let message = error.to_string();
            prop_assert!(
                [
                    "magic",
                    "checksum mismatch",
                    "truncated header",
                    "bad header",
                    "truncated array",
                    "trailing bytes"
                ]
                .iter()
                .any(|what| message.contains(what)),
                "{}",
                message
            );
        }
        Ok(())
    }

    fn bits(arrays: &[(String, Vec<f32>)]) -> Vec<(String, Vec<u32>)> {
        arrays
            .iter()
            .map(|(name, values)| (name.clone(), values.iter().map(|v| v.to_bits()).collect()))
            .collect()
    }

    fn arrays() -> impl Strategy<Value = Vec<(String, Vec<f32>)>> {
        vec((".{0,8}", vec(any::<f32>(), 0..8)), 0..4)
    }

    fn meta() -> impl Strategy<Value = serde_json::Value> {
        (any::<i64>(), ".{0,8}", any::<bool>())
            .prop_map(|(n, s, b)| serde_json::json!({"n": n, "s": s, "b": b, "list": [n, s]}))
    }

    /// `bytes` with their correct checksum appended: the parser behind the
    /// checksum sees them.
    fn sealed(mut bytes: Vec<u8>) -> Vec<u8> {
        let checksum = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// A blob with `header` as its JSON header and `tail` after it.
    fn with_header(header: &str, tail: &[u8]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&(header.len() as u64).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(tail);
        sealed(bytes)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_bytes_decode_or_are_named(
            mut bytes in vec(any::<u8>(), 0..96),
            magic in any::<bool>(),
            header_len in proptest::option::of(0u64..80),
        ) {
            // Most cases get past the magic and the header's length.
            if magic && bytes.len() >= 16 {
                bytes[..8].copy_from_slice(MAGIC);
                if let Some(len) = header_len {
                    bytes[8..16].copy_from_slice(&len.to_le_bytes());
                }
                named(decode(&sealed(bytes.clone())))?;
            }
            named(decode(&bytes))?;
        }

        #[test]
        fn blobs_round_trip_and_truncations_fail(meta in meta(), arrays in arrays()) {
            let borrowed: Vec<(String, &[f32])> =
                arrays.iter().map(|(n, v)| (n.clone(), &v[..])).collect();
            let bytes = encode(meta.clone(), &borrowed);
            let (decoded_meta, decoded) = decode(&bytes).unwrap();
            prop_assert_eq!(decoded_meta, meta);
            prop_assert_eq!(bits(&decoded), bits(&arrays));
            for cut in 0..bytes.len() {
                let result = decode(&bytes[..cut]);
                prop_assert!(result.is_err(), "cut {}", cut);
                named(result)?;
            }
        }

        #[test]
        fn huge_lengths_are_refused_before_allocating(
            len in prop_oneof![
                Just(u64::MAX),
                Just(u64::MAX / 4 + 1),
                Just(u64::from(u32::MAX)),
                any::<u64>(),
            ],
            tail in vec(any::<u8>(), 0..64),
        ) {
            // As the header's length.
            let mut bytes = MAGIC.to_vec();
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(&tail);
            if len > tail.len() as u64 {
                let error = decode(&sealed(bytes)).unwrap_err().to_string();
                prop_assert!(error.contains("truncated header"), "{}", error);
            }
            // As an array's length.
            let header = format!(r#"{{"meta":null,"arrays":[["w",{len}]]}}"#);
            if len > tail.len() as u64 / 4 {
                let error = decode(&with_header(&header, &tail)).unwrap_err().to_string();
                prop_assert!(error.contains("truncated array 'w'"), "{}", error);
            }
        }
    }
}
