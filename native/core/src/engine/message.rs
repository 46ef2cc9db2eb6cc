//! The engine's control messages and their byte layout.
//!
//! Four messages cross ranks: a [`RequestList`] (a rank's newly ready
//! tensors, to the coordinator), a [`ResponseList`] (the coordinator's
//! verdicts, to every rank), the [`Settings`] rank 0 broadcasts once at
//! start, and the [`Departures`] it broadcasts once at the end (who asked
//! to stop, and why). Every message opens with [`MESSAGE_VERSION`], so a rank running
//! another build fails with a message instead of misreading bytes. Integers
//! are little-endian; strings and lists are length-prefixed.
//!
//! Invariant: `decode(encode(m)) == m` for every message, and decoding
//! untrusted bytes never panics (every read is bounds-checked).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::reduce::ReduceOp;

use super::request::{Operation, TensorMeta};
use crate::dtype::DataType;

/// Version of the control-message layout; any change bumps it.
pub(crate) const MESSAGE_VERSION: u8 = 1;

/// Fewest bytes a tensor's metadata takes: name length, memory kind,
/// element type, shape length, operation.
const MIN_META_LEN: usize = 8 + 1 + 1 + 8 + 1;
/// Fewest bytes a request takes: its metadata and its age.
const MIN_REQUEST_LEN: usize = MIN_META_LEN + 8;
/// Fewest bytes a response takes: a failure with empty name and detail.
const MIN_RESPONSE_LEN: usize = 1 + 8 + 1 + 8;

/// A rank's tensors that are ready and not yet known to the coordinator.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RequestList {
    /// Each tensor with how long it has already waited on the sending rank
    /// (clocks of different processes are not comparable; ages are).
    pub requests: Vec<(TensorMeta, Duration)>,
}

/// The coordinator's verdict on one tensor name.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Response {
    /// Every rank submitted it and the metadata agree: execute it.
    Ready(ReadyResponse),
    /// It cannot run: every rank that submitted it fails it.
    Failed {
        /// The tensor.
        name: String,
        /// Why.
        failure: Failure,
    },
}

/// A tensor every rank has submitted with agreeing metadata.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ReadyResponse {
    /// Rank 0's metadata (alltoall splits are rank 0's own).
    pub meta: TensorMeta,
    /// Each rank's first dimension, for allgather; empty otherwise.
    pub first_dims: Vec<usize>,
}

/// Why a tensor fails on every rank.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Failure {
    /// The ranks submitted it with disagreeing metadata.
    Mismatch {
        /// What differs, on which ranks.
        detail: String,
    },
    /// Some ranks did not submit it within the stall timeout.
    Stalled {
        /// Ranks that never submitted it.
        missing: Vec<usize>,
        /// How long the first rank had waited.
        waited: Duration,
    },
}

impl Failure {
    /// The error a rank's handle for `name` gets.
    pub fn to_error(&self, name: &str) -> Error {
        match self {
            Failure::Mismatch { detail } => Error::TensorMismatch {
                name: name.to_string(),
                detail: detail.clone(),
            },
            Failure::Stalled { missing, waited } => Error::Stalled {
                name: name.to_string(),
                missing: missing.clone(),
                waited: *waited,
            },
        }
    }
}

/// The coordinator's answer to one negotiation round, in execution order.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ResponseList {
    pub responses: Vec<Response>,
}

/// The ranks that asked every rank to stop, each with its reason, in rank
/// order: every rank learns them when the ranks stop together. A rank sends
/// the coordinator a `Departures` of itself alone (or of nobody when it only
/// follows another rank's request); the coordinator broadcasts the union.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Departures {
    pub ranks: Vec<(usize, String)>,
}

/// Settings that must be equal on every rank; rank 0's win.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    pub fusion_threshold: u64,
    pub cache_capacity: u64,
}

// ------------------------------------------------------------------ encoding

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn new() -> Writer {
        Writer(vec![MESSAGE_VERSION])
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn usize(&mut self, v: usize) {
        self.u64(v as u64);
    }
    fn f64(&mut self, v: f64) {
        self.u64(v.to_bits());
    }
    fn str(&mut self, s: &str) {
        self.usize(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn usizes(&mut self, v: &[usize]) {
        self.usize(v.len());
        for &x in v {
            self.usize(x);
        }
    }
    fn duration(&mut self, d: Duration) {
        self.u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }
    fn meta(&mut self, m: &TensorMeta) {
        self.str(&m.name);
        self.u8(u8::from(m.on_device));
        self.u8(m.dtype.code());
        self.usizes(&m.shape);
        self.u8(m.operation.code());
        match &m.operation {
            Operation::Allreduce {
                op,
                prescale,
                postscale,
            } => {
                self.u8(op.code());
                self.f64(*prescale);
                self.f64(*postscale);
            }
            Operation::Broadcast { root } => self.usize(*root),
            Operation::Alltoall { splits } => self.usizes(splits),
            Operation::Reducescatter { op } => self.u8(op.code()),
            Operation::Allgather | Operation::Barrier | Operation::Join => {}
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Result<Reader<'a>> {
        let mut reader = Reader { bytes, what };
        let version = reader.u8()?;
        if version != MESSAGE_VERSION {
            return Err(reader.error(format!(
                "version {version}, this build speaks version {MESSAGE_VERSION}"
            )));
        }
        Ok(reader)
    }
    fn error(&self, detail: String) -> Error {
        Error::ControlMessage {
            detail: format!("{}: {detail}", self.what),
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(self.error("truncated".into()));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }
    fn usize(&mut self) -> Result<usize> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| self.error(format!("{v} does not fit usize")))
    }
    /// A length of a list whose items take at least `item_bytes` each:
    /// bounded by what is left, so garbage cannot make us allocate much.
    fn len(&mut self, item_bytes: usize) -> Result<usize> {
        let n = self.usize()?;
        if n.saturating_mul(item_bytes.max(1)) > self.bytes.len() {
            return Err(self.error(format!("list of {n} items is longer than the message")));
        }
        Ok(n)
    }
    fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_bits(self.u64()?))
    }
    fn str(&mut self) -> Result<String> {
        let n = self.len(1)?;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.error("string is not UTF-8".into()))
    }
    fn usizes(&mut self) -> Result<Vec<usize>> {
        let n = self.len(8)?;
        (0..n).map(|_| self.usize()).collect()
    }
    fn duration(&mut self) -> Result<Duration> {
        Ok(Duration::from_micros(self.u64()?))
    }
    fn reduce_op(&mut self) -> Result<ReduceOp> {
        let code = self.u8()?;
        ReduceOp::from_code(code).ok_or_else(|| self.error(format!("unknown reduce op {code}")))
    }
    fn meta(&mut self) -> Result<TensorMeta> {
        let name = self.str()?;
        let on_device = match self.u8()? {
            0 => false,
            1 => true,
            other => return Err(self.error(format!("unknown memory kind {other}"))),
        };
        let code = self.u8()?;
        let dtype = DataType::from_code(code)
            .ok_or_else(|| self.error(format!("unknown element type {code}")))?;
        let shape = self.usizes()?;
        // Receivers allocate `TensorMeta::bytes`: it must not overflow.
        let fits = shape
            .iter()
            .try_fold(dtype.size(), |bytes, &dim| bytes.checked_mul(dim))
            .is_some_and(|bytes| bytes <= isize::MAX as usize);
        if !fits {
            return Err(self.error(format!(
                "tensor '{name}' of shape {shape:?} is larger than memory"
            )));
        }
        let operation = match self.u8()? {
            1 => Operation::Allreduce {
                op: self.reduce_op()?,
                prescale: self.f64()?,
                postscale: self.f64()?,
            },
            2 => Operation::Allgather,
            3 => Operation::Broadcast {
                root: self.usize()?,
            },
            4 => Operation::Alltoall {
                splits: self.usizes()?,
            },
            5 => Operation::Reducescatter {
                op: self.reduce_op()?,
            },
            6 => Operation::Barrier,
            7 => Operation::Join,
            other => return Err(self.error(format!("unknown operation {other}"))),
        };
        Ok(TensorMeta {
            name,
            operation,
            dtype,
            shape,
            on_device,
        })
    }
    fn finish<T>(self, value: T) -> Result<T> {
        if !self.bytes.is_empty() {
            return Err(self.error(format!("{} trailing bytes", self.bytes.len())));
        }
        Ok(value)
    }
}

impl RequestList {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.usize(self.requests.len());
        for (meta, age) in &self.requests {
            w.meta(meta);
            w.duration(*age);
        }
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Result<RequestList> {
        let mut r = Reader::new(bytes, "request list")?;
        let n = r.len(MIN_REQUEST_LEN)?;
        let requests = (0..n)
            .map(|_| Ok((r.meta()?, r.duration()?)))
            .collect::<Result<_>>()?;
        r.finish(RequestList { requests })
    }
}

impl ResponseList {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.usize(self.responses.len());
        for response in &self.responses {
            match response {
                Response::Ready(ready) => {
                    w.u8(1);
                    w.meta(&ready.meta);
                    w.usizes(&ready.first_dims);
                }
                Response::Failed { name, failure } => {
                    w.u8(2);
                    w.str(name);
                    match failure {
                        Failure::Mismatch { detail } => {
                            w.u8(1);
                            w.str(detail);
                        }
                        Failure::Stalled { missing, waited } => {
                            w.u8(2);
                            w.usizes(missing);
                            w.duration(*waited);
                        }
                    }
                }
            }
        }
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Result<ResponseList> {
        let mut r = Reader::new(bytes, "response list")?;
        // Reserving `n` responses is then bounded by the message's length.
        let n = r.len(MIN_RESPONSE_LEN)?;
        let mut responses = Vec::with_capacity(n);
        for _ in 0..n {
            let response = match r.u8()? {
                1 => Response::Ready(ReadyResponse {
                    meta: r.meta()?,
                    first_dims: r.usizes()?,
                }),
                2 => {
                    let name = r.str()?;
                    let failure = match r.u8()? {
                        1 => Failure::Mismatch { detail: r.str()? },
                        2 => Failure::Stalled {
                            missing: r.usizes()?,
                            waited: r.duration()?,
                        },
                        other => return Err(r.error(format!("unknown failure {other}"))),
                    };
                    Response::Failed { name, failure }
                }
                other => return Err(r.error(format!("unknown response {other}"))),
            };
            responses.push(response);
        }
        r.finish(ResponseList { responses })
    }
}

impl Departures {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.usize(self.ranks.len());
        for (rank, reason) in &self.ranks {
            w.usize(*rank);
            w.str(reason);
        }
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Result<Departures> {
        let mut r = Reader::new(bytes, "departures")?;
        // A rank and an empty reason's length take 16 bytes.
        let n = r.len(16)?;
        let ranks = (0..n)
            .map(|_| Ok((r.usize()?, r.str()?)))
            .collect::<Result<_>>()?;
        r.finish(Departures { ranks })
    }
}

impl Settings {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(self.fusion_threshold);
        w.u64(self.cache_capacity);
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Result<Settings> {
        let mut r = Reader::new(bytes, "engine settings")?;
        let settings = Settings {
            fusion_threshold: r.u64()?,
            cache_capacity: r.u64()?,
        };
        r.finish(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metas() -> Vec<TensorMeta> {
        let ops = [
            Operation::Allreduce {
                op: ReduceOp::Average,
                prescale: 0.5,
                postscale: 2.0,
            },
            Operation::Allgather,
            Operation::Broadcast { root: 3 },
            Operation::Alltoall {
                splits: vec![1, 0, 2],
            },
            Operation::Reducescatter { op: ReduceOp::Max },
            Operation::Barrier,
            Operation::Join,
        ];
        ops.into_iter()
            .zip(DataType::ALL)
            .enumerate()
            .map(|(i, (operation, dtype))| TensorMeta {
                name: format!("layer{i}/grad ü"),
                operation,
                dtype,
                shape: vec![3, i],
                on_device: false,
            })
            .collect()
    }

    #[test]
    fn messages_round_trip() {
        let list = RequestList {
            requests: metas()
                .into_iter()
                .map(|m| (m, Duration::from_millis(1500)))
                .collect(),
        };
        assert_eq!(RequestList::decode(&list.encode()).unwrap(), list);

        let mut responses: Vec<Response> = metas()
            .into_iter()
            .map(|meta| {
                Response::Ready(ReadyResponse {
                    meta,
                    first_dims: vec![1, 2],
                })
            })
            .collect();
        responses.push(Response::Failed {
            name: "a".into(),
            failure: Failure::Mismatch {
                detail: "shape differs".into(),
            },
        });
        responses.push(Response::Failed {
            name: "b".into(),
            failure: Failure::Stalled {
                missing: vec![2, 3],
                waited: Duration::from_secs(61),
            },
        });
        let list = ResponseList { responses };
        assert_eq!(ResponseList::decode(&list.encode()).unwrap(), list);

        let settings = Settings {
            fusion_threshold: 1 << 27,
            cache_capacity: 1024,
        };
        assert_eq!(Settings::decode(&settings.encode()).unwrap(), settings);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let bytes = RequestList {
            requests: metas().into_iter().map(|m| (m, Duration::ZERO)).collect(),
        }
        .encode();
        for cut in 0..bytes.len() {
            assert!(RequestList::decode(&bytes[..cut]).is_err(), "cut {cut}");
            assert!(ResponseList::decode(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut other_version = bytes.clone();
        other_version[0] = 9;
        let err = RequestList::decode(&other_version).unwrap_err();
        assert!(err.to_string().contains("version 9"), "{err}");
        let mut huge = vec![MESSAGE_VERSION];
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(ResponseList::decode(&huge).is_err());
    }
}

/// Property tests: control messages come from other ranks.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn reduce_op() -> impl Strategy<Value = ReduceOp> {
        (1..=5u8).prop_map(|code| ReduceOp::from_code(code).unwrap())
    }

    /// Finite factors, so that `==` compares them.
    fn factor() -> impl Strategy<Value = f64> {
        any::<i32>().prop_map(|x| f64::from(x) / 64.0)
    }

    fn operation() -> impl Strategy<Value = Operation> {
        prop_oneof![
            (reduce_op(), factor(), factor()).prop_map(|(op, prescale, postscale)| {
                Operation::Allreduce {
                    op,
                    prescale,
                    postscale,
                }
            }),
            Just(Operation::Allgather),
            any::<usize>().prop_map(|root| Operation::Broadcast { root }),
            vec(any::<usize>(), 0..5).prop_map(|splits| Operation::Alltoall { splits }),
            reduce_op().prop_map(|op| Operation::Reducescatter { op }),
            Just(Operation::Barrier),
            Just(Operation::Join),
        ]
    }

    fn meta() -> impl Strategy<Value = TensorMeta> {
        (
            ".{0,12}",
            operation(),
            0..DataType::ALL.len(),
            vec(0usize..1000, 0..4),
            any::<bool>(),
        )
            .prop_map(|(name, operation, dtype, shape, on_device)| TensorMeta {
                name,
                operation,
                dtype: DataType::ALL[dtype],
                shape,
                on_device,
            })
    }

    fn micros() -> impl Strategy<Value = Duration> {
        any::<u64>().prop_map(Duration::from_micros)
    }

    fn response() -> impl Strategy<Value = Response> {
        let failure = prop_oneof![
            ".{0,12}".prop_map(|detail| Failure::Mismatch { detail }),
            (vec(any::<usize>(), 0..4), micros())
                .prop_map(|(missing, waited)| Failure::Stalled { missing, waited }),
        ];
        prop_oneof![
            (meta(), vec(any::<usize>(), 0..4))
                .prop_map(|(meta, first_dims)| Response::Ready(ReadyResponse { meta, first_dims })),
            (".{0,12}", failure).prop_map(|(name, failure)| Response::Failed { name, failure }),
        ]
    }

    /// A decoding error names the message and what was wrong with it.
    fn named(
        result: Result<impl std::fmt::Debug>,
        what: &str,
    ) -> std::result::Result<(), TestCaseError> {
        if let Err(error) = result {
            let Error::ControlMessage { detail } = &error else {
                return Err(TestCaseError::fail(format!(
                    "not a control message error: {error}"
                )));
            };
            prop_assert!(detail.starts_with(&format!("{what}: ")), "{}", detail);
            prop_assert!(detail.len() > what.len() + 2, "{}", detail);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_bytes_decode_or_are_named(mut bytes in vec(any::<u8>(), 0..96), versioned in any::<bool>()) {
            // Half the cases get past the version byte.
            if let (true, Some(first)) = (versioned, bytes.first_mut()) {
                *first = MESSAGE_VERSION;
            }
            named(RequestList::decode(&bytes), "request list")?;
            named(ResponseList::decode(&bytes), "response list")?;
            named(Settings::decode(&bytes), "engine settings")?;
            named(Departures::decode(&bytes), "departures")?;
        }

        #[test]
        fn departures_round_trip_and_truncations_fail(ranks in vec((0usize..4096, ".{0,40}"), 0..4)) {
            let departures = Departures { ranks };
            let bytes = departures.encode();
            prop_assert_eq!(Departures::decode(&bytes).unwrap(), departures);
            for cut in 0..bytes.len() {
                let result = Departures::decode(&bytes[..cut]);
                prop_assert!(result.is_err(), "cut {}", cut);
                named(result, "departures")?;
            }
        }

        #[test]
        fn request_lists_round_trip_and_truncations_fail(
            requests in vec((meta(), micros()), 0..4),
        ) {
            let list = RequestList { requests };
            let bytes = list.encode();
            prop_assert_eq!(RequestList::decode(&bytes).unwrap(), list);
            for cut in 0..bytes.len() {
                let result = RequestList::decode(&bytes[..cut]);
                prop_assert!(result.is_err(), "cut {}", cut);
                named(result, "request list")?;
            }
        }

        #[test]
        fn response_lists_round_trip_and_truncations_fail(responses in vec(response(), 0..4)) {
            let list = ResponseList { responses };
            let bytes = list.encode();
            prop_assert_eq!(ResponseList::decode(&bytes).unwrap(), list);
            for cut in 0..bytes.len() {
                let result = ResponseList::decode(&bytes[..cut]);
                prop_assert!(result.is_err(), "cut {}", cut);
                named(result, "response list")?;
            }
        }

        #[test]
        fn settings_round_trip(fusion_threshold in any::<u64>(), cache_capacity in any::<u64>()) {
            let settings = Settings { fusion_threshold, cache_capacity };
            let bytes = settings.encode();
            prop_assert_eq!(Settings::decode(&bytes).unwrap(), settings);
            for cut in 0..bytes.len() {
                prop_assert!(Settings::decode(&bytes[..cut]).is_err());
            }
        }

        #[test]
        fn huge_lengths_are_refused_before_allocating(
            len in prop_oneof![Just(u64::MAX), Just(u64::from(u32::MAX)), any::<u64>()],
            at in 0..4usize,
            // Enough for one request, so its count is not what is refused.
            tail in vec(any::<u8>(), MIN_REQUEST_LEN..64),
        ) {
            // The huge length as a list count, a name length, a shape
            // length or a list count of responses.
            let mut bytes = vec![MESSAGE_VERSION];
            match at {
                0 | 3 => {}
                1 => bytes.extend_from_slice(&1u64.to_le_bytes()),
                _ => {
                    bytes.extend_from_slice(&1u64.to_le_bytes());
                    bytes.extend_from_slice(&0u64.to_le_bytes()); // empty name
                    bytes.extend_from_slice(&[0, DataType::F32.code()]);
                }
            }
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(&tail);
            if len as usize > bytes.len() {
                let result = if at == 3 {
                    ResponseList::decode(&bytes).map(|_| ())
                } else {
                    RequestList::decode(&bytes).map(|_| ())
                };
                let error = result.unwrap_err().to_string();
                prop_assert!(error.contains("longer than the message"), "{}", error);
            }
        }

        #[test]
        fn shapes_larger_than_memory_are_refused(dims in vec(1usize << 20..usize::MAX, 4..6)) {
            let meta = TensorMeta {
                name: "w".into(),
                operation: Operation::Allgather,
                dtype: DataType::F32,
                shape: dims,
                on_device: false,
            };
            let bytes = RequestList { requests: vec![(meta, Duration::ZERO)] }.encode();
            let error = RequestList::decode(&bytes).unwrap_err().to_string();
            prop_assert!(error.contains("is larger than memory"), "{}", error);
        }
    }
}
