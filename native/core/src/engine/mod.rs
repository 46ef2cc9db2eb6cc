//! The collective engine: named asynchronous submissions, negotiated across
//! ranks, fused, executed in the same order everywhere (Horovod's design).
//!
//! Callers [`Engine::submit`] named tensors whenever they are ready — in any
//! order, from any thread — and get a [`Handle`]. A background thread runs a
//! cycle every [`EngineConfig::cycle_time`]: the ranks agree which tensors
//! are ready on *every* rank and in what order, then execute them, small
//! allreduces fused into one. Why negotiate at all: autograd produces
//! gradients in different orders on different ranks, and two ranks that
//! start different collectives deadlock; the negotiation gives all of them
//! one order.
//!
//! How a cycle agrees (module `negotiation`): tensors negotiated before sit
//! in a response cache at the same position on every rank, and one bitwise
//! AND across ranks says which of them are ready everywhere. Only new tensors
//! (or ones whose metadata changed) go to the coordinator, rank 0, which
//! keeps a table of who has submitted what (module `coordinator`), answers
//! with the tensors every rank now has, in order, fails those whose metadata
//! disagree across ranks naming the ranks, and warns about and finally fails
//! those some ranks never submit (module `stall`). Every rank then fuses
//! (module `fusion`) and executes the same batches: GPU tensors with NCCL
//! (module `device`), the rest on its [`Transport`].
//!
//! Invariant: every rank executes the same responses in the same order. The
//! negotiation is a sans-IO state machine (no sockets, no clock reads),
//! tested with simulated ranks in one thread ([`SimulatedJob`], which also
//! measures it at scale); the thread and the transport sit around it
//! (modules `background`, `transport`).
//!
//! Knobs come in one [`EngineConfig`]; nothing here reads the environment.
//! `fusion_threshold` and `cache_capacity` must agree across ranks, so rank
//! 0's values are used everywhere.

mod background;
mod config;
mod coordinator;
mod device;
mod fusion;
mod handle;
mod local_transport;
mod lockstep;
mod message;
mod negotiation;
mod payload;
mod request;
mod response_cache;
mod stall;
mod transport;

#[cfg(test)]
mod simulation;

use log::warn;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::{self, JoinHandle};

use crate::error::{Error, Result};

use background::{Background, Command, StopCause, Submission};

pub use background::Stopped;
use coordinator::Coordinator;
use device::DeviceBackend;
use fusion::FusionBuffer;
use message::Settings;
use negotiation::RankState;

pub use crate::dtype::DataType;
pub use config::EngineConfig;
use config::MAX_CACHE_CAPACITY;
pub use handle::Handle;
pub use local_transport::LocalTransport;
pub use lockstep::{CycleCost, SimulatedJob};
pub use payload::{DeviceBuffer, Payload};
pub use request::{Operation, Output, Request};
pub use transport::Transport;

/// The engine thread's name, before its rank (logs read the rank from it).
pub const THREAD_NAME_PREFIX: &str = "hvd-engine-";

/// A running engine on one rank. Dropping it asks every rank's engine to
/// stop (they stop together at the next cycle) and waits for this rank's
/// thread.
#[derive(Debug)]
pub struct Engine {
    rank: usize,
    size: usize,
    commands: Sender<Command>,
    stopped: StopCause,
    thread: Option<JoinHandle<()>>,
    /// The CUDA device of this rank's first GPU tensor; later ones must
    /// match it.
    gpu: OnceLock<usize>,
    in_flight: handle::InFlight,
}

impl Engine {
    /// Starts the engine's thread on `transport`. Every rank starts one;
    /// this exchanges rank 0's fusion threshold and cache capacity first.
    ///
    /// # Errors
    /// `InvalidArgument` for an unusable config, the transport's error if
    /// the first exchange fails, `Io` if the thread cannot be spawned.
    pub fn start<T: Transport + 'static>(mut transport: T, config: EngineConfig) -> Result<Engine> {
        config.check()?;
        let (rank, size) = (transport.rank(), transport.size());
        let mine = Settings {
            fusion_threshold: config.fusion_threshold as u64,
            cache_capacity: config.cache_capacity as u64,
        };
        let agreed = Settings::decode(&transport.control_broadcast(mine.encode())?)?;
        if agreed != mine {
            warn!("rank {rank}: using rank 0's engine settings {agreed:?} instead of {mine:?}");
        }
        let too_big = |what: &str| Error::InvalidArgument(format!("rank 0's {what} is too large"));
        let cache_capacity = usize::try_from(agreed.cache_capacity)
            .ok()
            .filter(|&c| c <= MAX_CACHE_CAPACITY)
            .ok_or_else(|| too_big("cache capacity"))?;
        let fusion_threshold =
            usize::try_from(agreed.fusion_threshold).map_err(|_| too_big("fusion threshold"))?;
        let stall = config.stall_policy();
        let state = RankState::new(rank, cache_capacity, fusion_threshold, stall.demote_after());
        let (commands, receiver) = mpsc::channel();
        let stopped: StopCause = Arc::new(Mutex::new(None));
        let background = Background {
            transport,
            state,
            coordinator: (rank == 0).then(|| Coordinator::new(size, stall)),
            commands: receiver,
            stopped: stopped.clone(),
            cycle_time: config.cycle_time,
            tensors: Default::default(),
            fusion: FusionBuffer::default(),
            early_shutdown: false,
            leaving: None,
            device: DeviceBackend::default(),
            holds: 0,
            held_since: None,
            moved: false,
        };
        let thread = thread::Builder::new()
            .name(format!("{THREAD_NAME_PREFIX}{rank}"))
            .spawn(move || background.run())
            .map_err(|e| Error::io("spawning the engine thread", e))?;
        Ok(Engine {
            rank,
            size,
            commands,
            stopped,
            thread: Some(thread),
            gpu: OnceLock::new(),
            in_flight: Default::default(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Why the engine has stopped (shut down here or on another rank, or
    /// its transport failed); `None` while it runs.
    pub fn stop_cause(&self) -> Option<String> {
        self.stopped().map(|stopped| stopped.cause)
    }

    /// How the engine stopped, with the ranks that left and why; `None`
    /// while it runs.
    pub fn stopped(&self) -> Option<Stopped> {
        self.stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Leaves the job, telling the other ranks why (`reason`, said in their
    /// errors: "rank 1 left the job (`reason`)"): every rank's engine stops
    /// at the next cycle. Waits for this rank's thread; does nothing once
    /// the engine has stopped.
    pub fn leave(&mut self, reason: &str) {
        let _ = self
            .commands
            .send(Command::Shutdown(Some(reason.to_string())));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// Submits `request`; its data is moved in, and the handle gives the
    /// result once every rank has submitted the same name and it has run.
    ///
    /// # Errors
    /// `InvalidArgument` if the request is inconsistent on its own (data
    /// length and shape, broadcast root, alltoall splits, scale factors);
    /// `DuplicateName` while an earlier submission of the name on this rank
    /// has not had its result taken (nor its handle dropped);
    /// `EngineStopped` once the engine has stopped. Errors that
    /// need the other ranks (mismatch, stall) arrive through the handle.
    pub fn submit(&self, request: Request) -> Result<Handle> {
        request.validate(self.size)?;
        if let Some(buffer) = request.data.device_buffer() {
            // One NCCL communicator, on one device, per rank: refused here,
            // before negotiation, since a rank failing it alone at execution
            // would leave the others waiting inside NCCL.
            let device = *self.gpu.get_or_init(|| buffer.device);
            if device != buffer.device {
                return Err(Error::InvalidArgument(format!(
                    "{}: a GPU tensor on cuda:{}, but this rank's GPU tensors are on cuda:{device}",
                    request.name, buffer.device
                )));
            }
        }
        let stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(stopped) = stopped.as_ref() {
            return Err(Error::EngineStopped {
                cause: stopped.cause.clone(),
            });
        }
        self.in_flight.enter(&request.name)?;
        let (handle, completer) = handle::tracked_pair(&request.name, self.in_flight.clone());
        self.commands
            .send(Command::Submit(Submission { request, completer }))
            .map_err(|_| Error::EngineStopped {
                cause: "the engine thread has exited".into(),
            })?;
        Ok(handle)
    }

    /// Says a group of submissions follows, until [`Engine::release`]: this
    /// rank's next cycle waits for the whole group (up to a second), so the
    /// group is negotiated, and fused, in one cycle on every rank that
    /// holds it too. Only a hint: a hold never released delays one cycle.
    pub fn hold(&self) {
        let _ = self.commands.send(Command::Hold);
    }

    /// Ends a [`Engine::hold`].
    pub fn release(&self) {
        let _ = self.commands.send(Command::Release);
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = self.commands.send(Command::Shutdown(None));
            let _ = thread.join();
        }
    }
}
