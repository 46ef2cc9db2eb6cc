//! The engine's thread: runs a negotiation cycle every `cycle_time` and
//! executes what it decides.
//!
//! A group of submissions made under a hold ([`super::Engine::hold`]) joins
//! one cycle whole: a rank whose thread woke on the group's first tensor
//! would otherwise negotiate that one alone while its peers, woken later,
//! had the whole group, and the rest would wait out a cycle time.
//!
//! An idle rank (nothing in flight) does not sleep out the cycle: it waits
//! for a submission and starts the next cycle as soon as one arrives, so a
//! lone synchronous collective costs a negotiation round trip, not a cycle
//! time. Ranks stay in step regardless: every cycle is a collective, and a
//! rank that starts early waits in it for the others. An idle rank also
//! cycles less often ([`IDLE_CYCLE`]): nothing it could agree to is pending
//! until it submits, which wakes it. While tensors are in
//! flight the cycle time paces the cycles, so submissions that arrive
//! together (a backward pass) are fused.
//!
//! Except right after a cycle that moved (took a submission in, or ran a
//! batch): then the next cycle starts at once. A rank left with tensors its
//! peers have not submitted yet waits for them inside that cycle's exchange,
//! which a peer enters as soon as it submits; sleeping out the cycle time
//! instead made the peer wait, in the same exchange, for the sleeper (a burst
//! of `allreduce_async` calls paid up to a cycle time whenever one rank's
//! cycle took in more of it than another's). A cycle that moved nothing (the
//! tensors are still missing elsewhere) is followed by the usual sleep, so
//! waiting never spins.
//!
//! Why a thread of its own: callers (autograd hooks, a JVM thread) submit
//! tensors whenever they are ready and must not block on other ranks; and the
//! transport needs one caller that issues every rank's collectives in the
//! same order. This thread is that caller. It owns the transport, the
//! [`RankState`] (and, on rank 0, the [`Coordinator`]) and the tensors' data;
//! callers only talk to it through a channel and their handles.
//!
//! Invariant: every collective this thread issues is decided by the
//! negotiation, so all ranks issue the same sequence. A transport error is
//! fatal: the thread fails every tensor in flight with it and stops, and
//! later submissions fail with `EngineStopped`.
//!
//! Ranks stop together: a rank that leaves (its engine dropped, or
//! [`super::Engine::leave`] with a reason) asks every rank to stop at the
//! next cycle, and in that last cycle the ranks tell each other who asked
//! and why ([`Departures`]), so a rank left behind can say "rank 1 left the
//! job (its function returned)" instead of only "shut down".

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use log::{debug, error, warn};

use crate::error::{Error, Result};
use crate::reduce::ReduceOp;

use super::coordinator::Coordinator;
use super::device::DeviceBackend;
use super::fusion::{Batch, FusionBuffer};
use super::handle::{self, Completer};
use super::message::{Departures, ReadyResponse};
use super::negotiation::{AfterBits, RankState};
use super::payload::Payload;
use super::request::{Operation, Output, Request};
use super::transport::Transport;
use crate::collectives::AllreduceOptions;

/// Longest wait of an idle rank between cycles (it cycles at once when a
/// command arrives). Other ranks' tensors cannot complete without this
/// rank's submission anyway; the wait only paces the coordinator's stall
/// checks and spares an idle job a collective every `cycle_time`.
const IDLE_CYCLE: Duration = Duration::from_millis(10);

/// Longest a hold keeps this rank's next cycle waiting for its release. A
/// hold only says more of a group is coming; one its caller never releases
/// costs a cycle this long, once, and is then dropped. Long, since a group's
/// submissions (copies of large tensors) may take a while.
const HOLD_LIMIT: Duration = Duration::from_secs(1);

/// Where a batch runs. Asked in [`BACKENDS`]' order, the first that takes a
/// batch runs it (Horovod's operation manager, without its build-time
/// matrix: a build without NCCL still has the backend, which fails GPU
/// tensors naming why).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    /// GPU tensors, through NCCL ([`DeviceBackend`]).
    Device,
    /// Host memory, through the transport (fused where the plan says so).
    Host,
}

const BACKENDS: [Backend; 2] = [Backend::Device, Backend::Host];

impl Backend {
    /// The backend of `batch`: every response of a batch agrees where its
    /// data is (`fusion::plan` never fuses GPU tensors).
    fn of(batch: &Batch) -> Backend {
        let takes = |backend: &Backend| match backend {
            Backend::Device => batch.responses[0].meta.on_device,
            Backend::Host => true,
        };
        BACKENDS.into_iter().find(takes).unwrap_or(Backend::Host)
    }
}

/// The cause of a shutdown that `departures` explain.
fn describe(departures: &[(usize, String)]) -> String {
    if departures.is_empty() {
        return "the engine was shut down (on this or another rank)".to_string();
    }
    departures
        .iter()
        .map(|(rank, reason)| format!("rank {rank} left the job ({reason})"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A request and the completer of its handle.
pub(crate) struct Submission {
    pub request: Request,
    pub completer: Completer,
}

/// What callers send the engine's thread.
pub(crate) enum Command {
    Submit(Submission),
    /// A group of submissions follows: the next cycle waits for its
    /// `Release` (up to [`HOLD_LIMIT`]) so that they join it together.
    Hold,
    Release,
    /// Stop every rank; the reason this rank leaves, if it gave one.
    Shutdown(Option<String>),
}

/// Why a rank's engine stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct Stopped {
    /// Said in every error of a later submission.
    pub cause: String,
    /// The ranks that asked to stop, with their reasons (empty when the
    /// engine stopped on an error, or the ranks could not tell each other).
    pub departures: Vec<(usize, String)>,
}

/// Why the thread stopped, shared with [`super::Engine::submit`]: `Some`
/// once stopped. Submitting checks it and sends under the same lock, so no
/// submission can slip in after the thread's last look at the channel.
pub(crate) type StopCause = Arc<Mutex<Option<Stopped>>>;

/// A departing rank's reason when its caller gave none.
const SHUT_DOWN: &str = "shut down";

pub(crate) struct Background<T: Transport> {
    pub transport: T,
    pub state: RankState,
    pub coordinator: Option<Coordinator>,
    pub commands: Receiver<Command>,
    pub stopped: StopCause,
    pub cycle_time: Duration,
    pub tensors: HashMap<String, Submission>,
    pub fusion: FusionBuffer,
    /// A shutdown (or every sender gone) seen while waiting for a
    /// submission, for the next `take_commands`.
    pub early_shutdown: bool,
    /// Why this rank asked to stop, once it has (the first reason given).
    pub leaving: Option<String>,
    /// The backend of GPU tensors.
    pub device: DeviceBackend,
    /// Holds not yet released, and when the first of them came in.
    pub holds: usize,
    pub held_since: Option<Instant>,
    /// This cycle took a submission in or ran a batch (see `run`).
    pub moved: bool,
}

impl<T: Transport> Background<T> {
    pub fn run(mut self) {
        let rank = self.transport.rank();
        let outcome = loop {
            let started = Instant::now();
            if self.take_commands(started) {
                self.state.request_shutdown();
            }
            match self.cycle() {
                Ok(true) => {}
                Ok(false) => break Ok(self.exchange_departures()),
                Err(e) => break Err(e),
            }
            let left = self.cycle_time.saturating_sub(started.elapsed());
            let moved = std::mem::take(&mut self.moved);
            if self.tensors.is_empty() {
                self.wait_for_submission(left.max(IDLE_CYCLE));
            } else if !moved && !left.is_zero() {
                thread::sleep(left);
            }
        };
        let (cause, departures) = match outcome {
            Ok(departures) => {
                let cause = describe(&departures);
                debug!("rank {rank}: engine shut down: {cause}");
                (cause, departures)
            }
            Err(error) => {
                error!("rank {rank}: engine stopped: {error}");
                for (_, submission) in self.tensors.drain() {
                    submission.completer.complete(Err(error.duplicate()));
                }
                (error.to_string(), Vec::new())
            }
        };
        let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        *stopped = Some(Stopped {
            cause: cause.clone(),
            departures,
        });
        let stopped_error = || Error::EngineStopped {
            cause: cause.clone(),
        };
        for (_, submission) in self.tensors.drain() {
            submission.completer.complete(Err(stopped_error()));
        }
        while let Ok(command) = self.commands.try_recv() {
            if let Command::Submit(submission) = command {
                submission.completer.complete(Err(stopped_error()));
            }
        }
    }

    /// Waits up to `limit` for a command and takes it in (the next cycle
    /// then starts at once); a shutdown is kept for `take_commands`.
    fn wait_for_submission(&mut self, limit: Duration) {
        match self.commands.recv_timeout(limit) {
            Ok(command) => {
                if self.take_command(command, Instant::now()) {
                    self.early_shutdown = true;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => self.early_shutdown = true,
        }
    }

    /// Moves submitted requests into the negotiation, waiting for the rest of
    /// a held group; true when the engine should shut down (asked to, or
    /// every sender is gone).
    fn take_commands(&mut self, now: Instant) -> bool {
        let mut shutdown = std::mem::take(&mut self.early_shutdown);
        loop {
            let command = match self.commands.try_recv() {
                Ok(command) => command,
                Err(TryRecvError::Disconnected) => return true,
                Err(TryRecvError::Empty) => match self.hold_left().filter(|_| !shutdown) {
                    None => return shutdown,
                    Some(left) => match self.commands.recv_timeout(left) {
                        Ok(command) => command,
                        Err(RecvTimeoutError::Timeout) => continue, // (`hold_left` drops it)
                        Err(RecvTimeoutError::Disconnected) => return true,
                    },
                },
            };
            shutdown |= self.take_command(command, now);
        }
    }

    /// How much longer the current hold may keep the cycle waiting; `None`
    /// when nothing is held, or the hold has outlived [`HOLD_LIMIT`] (it is
    /// then dropped).
    fn hold_left(&mut self) -> Option<Duration> {
        let since = self.held_since.filter(|_| self.holds > 0)?;
        let left = HOLD_LIMIT.saturating_sub(since.elapsed());
        if left.is_zero() {
            debug!(
                "rank {}: a hold was not released within {HOLD_LIMIT:?}",
                self.transport.rank()
            );
            self.holds = 0;
            return None;
        }
        Some(left)
    }

    /// One command: a submission joins the negotiation; true for a shutdown.
    fn take_command(&mut self, command: Command, now: Instant) -> bool {
        match command {
            Command::Submit(submission) => {
                let meta = submission.request.meta();
                match self.state.submit(meta, now) {
                    Ok(()) => {
                        let name = submission.request.name.clone();
                        self.tensors.insert(name, submission);
                        self.moved = true;
                    }
                    Err(e) => submission.completer.complete(Err(e)),
                }
                false
            }
            Command::Hold => {
                if self.holds == 0 {
                    self.held_since = Some(Instant::now());
                }
                self.holds += 1;
                false
            }
            Command::Release => {
                self.holds = self.holds.saturating_sub(1);
                false
            }
            Command::Shutdown(reason) => {
                if self.leaving.is_none() {
                    self.leaving = Some(reason.unwrap_or_else(|| SHUT_DOWN.to_string()));
                }
                true
            }
        }
    }

    /// The last exchange, once every rank agreed to stop: which ranks asked
    /// to, and why. Best effort: a rank that cannot tell stops all the same
    /// (the cause then names no rank).
    fn exchange_departures(&mut self) -> Vec<(usize, String)> {
        let rank = self.transport.rank();
        // Asked by a sender dropping without a word: a departure all the same.
        let reason = self
            .leaving
            .clone()
            .or_else(|| self.state.shutting_down().then(|| SHUT_DOWN.to_string()));
        let mine = Departures {
            ranks: reason.into_iter().map(|reason| (rank, reason)).collect(),
        };
        let exchanged = self
            .transport
            .control_gather(&mine.encode())
            .and_then(|gathered| {
                let all = match gathered {
                    Some(lists) => {
                        let mut all = Departures::default();
                        for list in lists {
                            all.ranks.extend(Departures::decode(&list)?.ranks);
                        }
                        all.ranks.sort();
                        all.encode()
                    }
                    None => Vec::new(),
                };
                Departures::decode(&self.transport.control_broadcast(all)?)
            });
        match exchanged {
            Ok(departures) => departures.ranks,
            Err(error) => {
                debug!("rank {rank}: the ranks could not tell each other why they stop: {error}");
                Vec::new()
            }
        }
    }

    /// One cycle; false once every rank agreed to stop.
    fn cycle(&mut self) -> Result<bool> {
        let now = Instant::now();
        let due = self
            .coordinator
            .as_ref()
            .is_some_and(|c| c.wants_round(now));
        let mut words = self.state.start_cycle(now, due);
        self.transport.bitwise_and(&mut words)?;
        let request_list = match self.state.on_bits(&words, Instant::now())? {
            AfterBits::Stop => return Ok(false),
            AfterBits::Continue(list) => list,
        };
        let responses = match request_list {
            Some(mine) => Some(self.negotiate(&mine)?),
            None => None,
        };
        let plan = self.state.on_responses(responses.as_deref())?;
        let rank = self.transport.rank();
        for (name, error) in plan.failures {
            warn!("rank {rank}: {error}");
            if let Some(submission) = self.tensors.remove(&name) {
                submission.completer.complete(Err(error));
            }
        }
        for error in plan.others_failed {
            warn!("rank {rank}: {error} (this rank did not submit it)");
        }
        for batch in plan.batches {
            self.moved = true;
            self.execute(batch)?;
        }
        Ok(true)
    }

    /// A negotiation round: requests to the coordinator, its responses back.
    fn negotiate(&mut self, mine: &[u8]) -> Result<Vec<u8>> {
        let gathered = self.transport.control_gather(mine)?;
        let answer = match (&mut self.coordinator, gathered) {
            (Some(coordinator), Some(lists)) => {
                let outcome = coordinator.round(&lists, Instant::now())?;
                for stall in outcome.warnings {
                    warn!(
                        "tensor '{}' has waited {:.1} s for ranks {:?} (submitted by ranks {:?}); \
                         every rank must submit it",
                        stall.name,
                        stall.waited.as_secs_f64(),
                        stall.missing,
                        stall.submitted
                    );
                }
                outcome.responses
            }
            (None, _) => Vec::new(),
            (Some(_), None) => {
                return Err(Error::ControlMessage {
                    detail: "the transport gathered nothing on the coordinator".into(),
                })
            }
        };
        self.transport.control_broadcast(answer)
    }

    /// Runs one batch; `Unsupported` fails only the batch's tensors, any
    /// other error stops the engine.
    fn execute(&mut self, batch: Batch) -> Result<()> {
        let mut submissions = Vec::with_capacity(batch.responses.len());
        for response in &batch.responses {
            // Planned without data here only while this rank has joined
            // (the negotiation refuses it otherwise): stand in for it.
            let submission = match self.tensors.remove(&response.meta.name) {
                Some(submission) => submission,
                None => stand_in(response)?,
            };
            submissions.push(submission);
        }
        let result = match Backend::of(&batch) {
            // Never fused (`fusion::plan`), never stood in for (the
            // coordinator refuses GPU tensors while a rank has joined).
            Backend::Device => self
                .device
                .execute(&mut self.transport, &mut submissions[0].request)
                .map(|output| vec![output]),
            Backend::Host if batch.responses.len() == 1 => self
                .execute_one(&batch.responses[0], &mut submissions[0].request)
                .map(|output| vec![output]),
            Backend::Host => self.execute_fused(&batch, &mut submissions),
        };
        match result {
            Ok(outputs) => {
                for (submission, output) in submissions.into_iter().zip(outputs) {
                    submission.completer.complete(Ok(output));
                }
                Ok(())
            }
            Err(error) => {
                for submission in submissions {
                    submission.completer.complete(Err(error.duplicate()));
                }
                match error {
                    Error::Unsupported { .. }
                    | Error::NoCudaSupport
                    | Error::NcclUnavailable { .. } => Ok(()),
                    fatal => Err(fatal),
                }
            }
        }
    }

    fn execute_one(&mut self, response: &ReadyResponse, request: &mut Request) -> Result<Output> {
        let dtype = request.dtype;
        let mut shape = request.shape.clone();
        let row_bytes = shape.iter().skip(1).product::<usize>() * dtype.size();
        let data = match &request.operation {
            Operation::Allreduce {
                op,
                prescale,
                postscale,
            } => {
                let mut data = std::mem::take(&mut request.data);
                let options = allreduce_options(*op, *prescale, *postscale);
                self.transport.allreduce(dtype, options, &mut data)?;
                data
            }
            Operation::Barrier => {
                self.transport.barrier()?;
                Payload::default()
            }
            Operation::Join => {
                let last = response.first_dims.first().copied().unwrap_or(0);
                let last = i32::try_from(last).map_err(|_| Error::ControlMessage {
                    detail: format!("join answered rank {last}"),
                })?;
                last.to_ne_bytes().to_vec().into()
            }
            Operation::Broadcast { root } => {
                let mut data = std::mem::take(&mut request.data);
                self.transport.broadcast(dtype, *root, &mut data)?;
                data
            }
            Operation::Allgather => {
                let bytes: Vec<usize> = response.first_dims.iter().map(|d| d * row_bytes).collect();
                shape[0] = response.first_dims.iter().sum();
                self.transport
                    .allgather(dtype, &request.data, &bytes)?
                    .into()
            }
            Operation::Alltoall { splits } => {
                let bytes: Vec<usize> = splits.iter().map(|s| s * row_bytes).collect();
                let data = self.transport.alltoall(dtype, &request.data, &bytes)?;
                shape[0] = data.len().checked_div(row_bytes).unwrap_or(0);
                data.into()
            }
            Operation::Reducescatter { op } => {
                let data = self
                    .transport
                    .reducescatter(dtype, *op, &request.data, row_bytes)?;
                if let Some(first) = shape.first_mut() {
                    *first = data.len().checked_div(row_bytes).unwrap_or(0);
                }
                data.into()
            }
        };
        Ok(Output { data, shape })
    }

    /// Copies the batch into the fusion buffer, reduces it once, copies the
    /// results back out.
    fn execute_fused(
        &mut self,
        batch: &Batch,
        submissions: &mut [Submission],
    ) -> Result<Vec<Output>> {
        let first = &batch.responses[0].meta;
        let Operation::Allreduce {
            op,
            prescale,
            postscale,
        } = first.operation
        else {
            return Err(Error::ControlMessage {
                detail: format!("fused a batch of {}", first.operation.kind()),
            });
        };
        let buffer = self.fusion.bytes_mut(batch.bytes());
        let mut at = 0;
        for submission in submissions.iter() {
            let data = &submission.request.data;
            buffer[at..at + data.len()].copy_from_slice(data);
            at += data.len();
        }
        let options = allreduce_options(op, prescale, postscale);
        self.transport.allreduce(first.dtype, options, buffer)?;
        let mut at = 0;
        let mut outputs = Vec::with_capacity(submissions.len());
        for submission in submissions.iter_mut() {
            let mut data = std::mem::take(&mut submission.request.data);
            let len = data.len();
            data.copy_from_slice(&buffer[at..at + len]);
            at += len;
            outputs.push(Output {
                data,
                shape: submission.request.shape.clone(),
            });
        }
        Ok(outputs)
    }
}

/// What a joined rank contributes to a collective it never submitted: zeros
/// to an allreduce, no data to a barrier (the coordinator refuses the other
/// collectives while a rank has joined). Nobody waits for its result.
fn stand_in(response: &ReadyResponse) -> Result<Submission> {
    let meta = &response.meta;
    let data = match meta.operation {
        Operation::Allreduce { .. } => vec![0; meta.bytes()].into(),
        Operation::Barrier => Payload::default(),
        _ => {
            return Err(Error::ControlMessage {
                detail: format!(
                    "{} '{}' was planned but has no data here",
                    meta.operation.kind(),
                    meta.name
                ),
            })
        }
    };
    let (_, completer) = handle::pair(&meta.name);
    Ok(Submission {
        request: Request {
            name: meta.name.clone(),
            operation: meta.operation.clone(),
            dtype: meta.dtype,
            shape: meta.shape.clone(),
            data,
        },
        completer,
    })
}

/// What the transport's allreduce computes for an allreduce response; the
/// transport applies the scale factors (request validation has checked them).
fn allreduce_options(op: ReduceOp, prescale: f64, postscale: f64) -> AllreduceOptions {
    AllreduceOptions::new(op)
        .with_prescale(prescale)
        .with_postscale(postscale)
}
