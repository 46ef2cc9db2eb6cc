//! The caller's side of a submission: a [`Handle`] to poll or wait on.
//!
//! The engine thread completes a submission exactly once through its
//! [`Completer`]; a completer dropped without completing (the engine thread
//! ended abnormally) completes the handle with `EngineStopped`, so no waiter
//! can be left waiting forever.
//!
//! A submission's name stays taken on its rank until the caller has its
//! result (or drops the handle), not only until the ranks have run it: how
//! soon the ranks run it depends on their timing, and whether submitting a
//! name again is refused must not (a second submission before the first's
//! result was taken is a duplicate, as Horovod's tests expect).

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

use super::request::Output;

#[derive(Debug)]
enum Slot {
    Waiting,
    Done(Result<Output>),
    Taken,
}

#[derive(Debug)]
struct Shared {
    slot: Mutex<Slot>,
    done: Condvar,
}

/// The result of one submitted request, once every rank has run it.
#[derive(Debug)]
pub struct Handle {
    name: String,
    shared: Arc<Shared>,
    /// The rank's names in flight, which this one leaves once its result is
    /// taken or the handle dropped.
    in_flight: Option<InFlight>,
}

/// The engine's side of a [`Handle`].
#[derive(Debug)]
pub(crate) struct Completer {
    shared: Option<Arc<Shared>>,
}

/// The names submitted on a rank whose results the callers have not taken
/// yet: a second submission of one of them is refused at once, as Horovod
/// does, rather than failing later through its handle.
#[derive(Debug, Clone, Default)]
pub(crate) struct InFlight(Arc<Mutex<HashSet<String>>>);

impl InFlight {
    /// Registers `name`, or refuses it while an earlier one is in flight.
    pub(crate) fn enter(&self, name: &str) -> Result<()> {
        let mut names = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !names.insert(name.to_string()) {
            return Err(Error::DuplicateName { name: name.into() });
        }
        Ok(())
    }

    fn leave(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

/// A handle and completer for the tensor `name`, which stays in
/// `in_flight` until its result is taken or the handle dropped.
pub(crate) fn tracked_pair(name: &str, in_flight: InFlight) -> (Handle, Completer) {
    let (mut handle, completer) = pair(name);
    handle.in_flight = Some(in_flight);
    (handle, completer)
}

/// A connected handle and completer for the tensor `name`.
pub(crate) fn pair(name: &str) -> (Handle, Completer) {
    let shared = Arc::new(Shared {
        slot: Mutex::new(Slot::Waiting),
        done: Condvar::new(),
    });
    (
        Handle {
            name: name.to_string(),
            shared: shared.clone(),
            in_flight: None,
        },
        Completer {
            shared: Some(shared),
        },
    )
}

impl Handle {
    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True once the result is available (or was taken).
    pub fn is_done(&self) -> bool {
        !matches!(*self.lock(), Slot::Waiting)
    }

    /// Blocks until the result is available (or was taken) or `timeout` has
    /// passed, and says which; the result stays for [`Handle::wait`] or
    /// [`Handle::poll`] to take. Lets a caller wait in slices (to handle
    /// signals between them) without mistaking a slice's end for a result.
    pub fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut slot = self.lock();
        while matches!(*slot, Slot::Waiting) {
            let left = match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return false;
            }
            slot = self
                .shared
                .done
                .wait_timeout(slot, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// The result if it is available, without blocking; `None` while the
    /// request is in flight.
    pub fn poll(&mut self) -> Option<Result<Output>> {
        let result = take(&mut self.lock(), &self.name);
        if result.is_some() {
            self.free_name();
        }
        result
    }

    /// Blocks until the result is available or `timeout` has passed.
    ///
    /// # Errors
    /// The request's own error; `Timeout` naming the tensor if it is still
    /// in flight after `timeout` (the handle stays usable);
    /// `InvalidArgument` if the result was already taken.
    pub fn wait(&mut self, timeout: Duration) -> Result<Output> {
        let deadline = Instant::now().checked_add(timeout);
        let mut slot = self.lock();
        loop {
            if let Some(result) = take(&mut slot, &self.name) {
                drop(slot);
                self.free_name();
                return result;
            }
            let left = match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return Err(Error::Timeout {
                    what: format!(
                        "after {timeout:?} waiting for tensor '{}' to complete",
                        self.name
                    ),
                    rank: None,
                });
            }
            slot = self
                .shared
                .done
                .wait_timeout(slot, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.shared
            .slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The name may be submitted again (before the caller sees the result).
    fn free_name(&mut self) {
        if let Some(in_flight) = self.in_flight.take() {
            in_flight.leave(&self.name);
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.free_name();
    }
}

fn take(slot: &mut Slot, name: &str) -> Option<Result<Output>> {
    match std::mem::replace(slot, Slot::Taken) {
        Slot::Waiting => {
            *slot = Slot::Waiting;
            None
        }
        Slot::Done(result) => Some(result),
        Slot::Taken => Some(Err(Error::InvalidArgument(format!(
            "the result of tensor '{name}' was already taken"
        )))),
    }
}

impl Completer {
    /// Delivers the result and wakes the waiter.
    pub fn complete(mut self, result: Result<Output>) {
        self.deliver(result);
    }

    fn deliver(&mut self, result: Result<Output>) {
        if let Some(shared) = self.shared.take() {
            let mut slot = shared.slot.lock().unwrap_or_else(PoisonError::into_inner);
            *slot = Slot::Done(result);
            shared.done.notify_all();
        }
    }
}

impl Drop for Completer {
    fn drop(&mut self) {
        self.deliver(Err(Error::EngineStopped {
            cause: "the engine dropped the request without completing it".into(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    #[test]
    fn wait_returns_the_result_once() {
        let (mut handle, completer) = pair("t");
        assert!(handle.poll().is_none());
        let waker = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            completer.complete(Ok(Output {
                data: vec![1, 2].into(),
                shape: vec![2],
            }));
        });
        let output = handle.wait(Duration::from_secs(10)).unwrap();
        assert_eq!(output.data, vec![1, 2]);
        waker.join().unwrap();
        assert!(handle.is_done());
        let again = handle.poll().unwrap().unwrap_err();
        assert!(again.to_string().contains("already taken"), "{again}");
    }

    #[test]
    fn wait_ready_leaves_the_result_for_wait() {
        let (mut handle, completer) = pair("ready");
        assert!(!handle.wait_ready(Duration::from_millis(10)));
        completer.complete(Err(Error::Timeout {
            what: "waiting for rank 1".into(),
            rank: Some(1),
        }));
        assert!(handle.wait_ready(Duration::from_millis(10)));
        let err = handle.wait(Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("rank 1"), "{err}");
        assert!(handle.wait_ready(Duration::ZERO), "taken counts as ready");
    }

    #[test]
    fn wait_times_out_and_can_be_retried() {
        let (mut handle, completer) = pair("slow");
        let err = handle.wait(Duration::from_millis(10)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "timed out after 10ms waiting for tensor 'slow' to complete"
        );
        drop(completer);
        let err = handle.wait(Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, Error::EngineStopped { .. }), "{err}");
    }
}
