//! A [`Duration`] as a whole number of milliseconds in serde formats: the
//! unit every edge (Spark conf, Horovod's variables, JSON) converts to.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

pub(crate) fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    let millis = u64::try_from(value.as_millis()).unwrap_or(u64::MAX);
    serializer.serialize_u64(millis)
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    u64::deserialize(deserializer).map(Duration::from_millis)
}
