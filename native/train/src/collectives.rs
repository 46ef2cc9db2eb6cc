//! What the trainer needs from the other ranks, as a trait: the collective
//! engine in a Spark job, nothing for a single process (and for tests).

use std::time::Duration;

use horovod_core::{Engine, Operation, ReduceOp, Request};

use crate::error::{Error, Result};

/// The reduced values, which must be as many as this rank sent.
fn same_length<T>(name: &str, sent: usize, reduced: Option<Vec<T>>) -> Result<Vec<T>> {
    match reduced {
        Some(values) if values.len() == sent => Ok(values),
        Some(values) => Err(Error::Exchange(format!(
            "'{name}' came back with {} values for {sent} sent",
            values.len()
        ))),
        None => Err(Error::Exchange(format!(
            "'{name}' came back as bytes that are not whole values"
        ))),
    }
}

/// Sums and broadcasts across the ranks of a job. Every rank must make the
/// same calls, with the same names, in the same order.
pub trait Collectives: Sync {
    /// This rank.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// Element-wise sums of every rank's `values`.
    fn allreduce_sum(&self, name: &str, values: Vec<f32>) -> Result<Vec<f32>>;
    /// The same in double precision, for metrics and counts.
    fn allreduce_sum_f64(&self, name: &str, values: Vec<f64>) -> Result<Vec<f64>>;
    /// Rank `root`'s bytes on every rank; the others' `bytes` are ignored.
    fn broadcast(&self, name: &str, bytes: Vec<u8>, root: usize) -> Result<Vec<u8>>;
}

/// A single process: sums and broadcasts are identities.
pub struct Single;

impl Collectives for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn allreduce_sum(&self, _: &str, values: Vec<f32>) -> Result<Vec<f32>> {
        Ok(values)
    }
    fn allreduce_sum_f64(&self, _: &str, values: Vec<f64>) -> Result<Vec<f64>> {
        Ok(values)
    }
    fn broadcast(&self, _: &str, bytes: Vec<u8>, _: usize) -> Result<Vec<u8>> {
        Ok(bytes)
    }
}

/// The collective engine of a rank, with how long to wait for results.
pub struct EngineCollectives<'a> {
    engine: &'a Engine,
    timeout: Duration,
}

impl<'a> EngineCollectives<'a> {
    /// Collectives through `engine`, each waiting at most `timeout`.
    pub fn new(engine: &'a Engine, timeout: Duration) -> EngineCollectives<'a> {
        EngineCollectives { engine, timeout }
    }

    fn run(&self, request: Request) -> Result<horovod_core::Output> {
        Ok(self.engine.submit(request)?.wait(self.timeout)?)
    }
}

impl Collectives for EngineCollectives<'_> {
    fn rank(&self) -> usize {
        self.engine.rank()
    }

    fn size(&self) -> usize {
        self.engine.size()
    }

    fn allreduce_sum(&self, name: &str, values: Vec<f32>) -> Result<Vec<f32>> {
        let request = Request::from_elements(
            name,
            Operation::allreduce(ReduceOp::Sum),
            vec![values.len()],
            &values,
        );
        let summed = self.run(request)?.to_elements::<f32>();
        same_length(name, values.len(), summed)
    }

    fn allreduce_sum_f64(&self, name: &str, values: Vec<f64>) -> Result<Vec<f64>> {
        let request = Request::from_elements(
            name,
            Operation::allreduce(ReduceOp::Sum),
            vec![values.len()],
            &values,
        );
        let summed = self.run(request)?.to_elements::<f64>();
        same_length(name, values.len(), summed)
    }

    fn broadcast(&self, name: &str, bytes: Vec<u8>, root: usize) -> Result<Vec<u8>> {
        // Ranks must agree on shapes, and only the root knows the length: send it first.
        let len = (bytes.len() as u64).to_le_bytes();
        let request = Request::from_elements(
            format!("{name}.length"),
            Operation::Broadcast { root },
            vec![8],
            &len,
        );
        let len = self.run(request)?.data;
        let len: [u8; 8] = (*len).try_into().map_err(|_| {
            Error::Exchange(format!("'{name}': a length of {} bytes, not 8", len.len()))
        })?;
        let len = u64::from_le_bytes(len) as usize;
        let mut data = bytes;
        data.resize(len, 0);
        let request = Request::from_elements(name, Operation::Broadcast { root }, vec![len], &data);
        Ok(self.run(request)?.data.into_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_of_another_length_is_an_error_not_a_short_vector() {
        assert_eq!(
            same_length("g", 2, Some(vec![1.0f32, 2.0])).unwrap(),
            [1.0, 2.0]
        );
        let err = same_length("g", 3, Some(vec![1.0f32])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "collective: 'g' came back with 1 values for 3 sent"
        );
        let err = same_length::<f32>("g", 3, None).unwrap_err();
        assert!(err.to_string().contains("not whole values"), "{err}");
    }
}
