//! The byte layout of checkpoints and saved models: a JSON header (metadata
//! and the names and lengths of the arrays) followed by the arrays as
//! little-endian `f32`. Self-describing, so a reader checks what it loads.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"HVRSBLOB";

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
    let mut out = Vec::with_capacity(16 + header.len() + 4 * values);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for (_, array) in arrays {
        for v in array.iter() {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// Named `f32` arrays, in the order they were written.
pub type Arrays = Vec<(String, Vec<f32>)>;

/// Reads what [`encode`] wrote.
pub fn decode(bytes: &[u8]) -> Result<(serde_json::Value, Arrays)> {
    let bad = |what: &str| Error::Checkpoint(what.to_string());
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return Err(bad(
            "not a horovod-rs checkpoint or model (wrong magic bytes)",
        ));
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
        let end = offset.checked_add(len * 4).filter(|&e| e <= bytes.len());
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
            .contains("truncated array 'a'"));
        assert!(decode(b"garbage garbage!")
            .unwrap_err()
            .to_string()
            .contains("magic"));
    }
}
