//! horovod-core: the transport and collectives of horovod-rs.
//!
//! Every Spark barrier task of a job is one rank, and joins it through
//! [`launch::join`] with one [`launch::RankSpec`]: it binds a [`Listener`],
//! exchanges its "host:port" with the other ranks through the
//! [`RendezvousService`] the Spark driver runs ([`exchange_entries`]), and
//! [`connect`] turns the addresses into a [`Communicator`] whose TCP
//! connections, each authenticated both ways with the per-job secret, open
//! when a collective first needs them (log2 N per rank for most jobs).
//! The communicator then runs Horovod's collectives: allreduce (with scale
//! factors, fp16 compression, grouped, or on untyped bytes), allgather,
//! broadcast, alltoall, reducescatter and barrier, on eight element types
//! ([`Element`], or [`DataType`] at run time). Allreduce and barrier go
//! through shared memory when every rank is on one host.
//!
//! Modules, one job each: `launch` (a rank's spec, the table of settings,
//! the words of failures, and joining), `error` (what can fail), `auth` (HMAC challenge–response),
//! `wire` (hello and header layouts), `handshake` (the authenticated
//! exchange opening every connection), `rendezvous_service` (the driver's
//! service gathering the ranks' addresses), `rendezvous` (listener,
//! connect: joining a job), `net` (binding, dialling "host:port", bounds on
//! waiting), `doorbell` (waking an accept loop without a
//! polling pause), `fd_limit` (the descriptors a mesh needs, checked at
//! join), `address` (the parts of "host:port"), `hosts` (which host each
//! rank is on: its address's or `HOROVOD_HOSTNAME`),
//! `config` (timeouts, transport policy, encryption), `link` (one connection
//! and its error mapping), `mesh` (the links to other ranks, each opened on
//! first use: dialling, the acceptor, crossing dials), `communicator` (a
//! rank's end of the mesh on the transports its policy and hosts allow:
//! allreduce and barrier; its `hierarchy` levels), `tcp` (allreduce over
//! TCP: direct, owners, recursive doubling and pipelined ring), `shm` (allreduce and barrier
//! through shared memory), `partition` (the split of data into per-rank
//! segments), `collectives` (the other collectives, one module each),
//! `reduce` (operations and element types), `dtype` (element types at run
//! time), `engine` (named asynchronous submissions negotiated across ranks,
//! fused, run on a transport or, for GPU tensors, NCCL), `nccl` (GPU
//! collectives through NCCL, with the `cuda` feature), `millis` (durations
//! as milliseconds in JSON). No two modules use each other, directly or
//! through others (`scripts/module_graph.py --check`, part of `make lint`).

#![warn(missing_docs)]

mod address;
mod auth;
mod collectives;
mod communicator;
mod config;
mod doorbell;
mod dtype;
pub mod engine;
mod error;
mod fd_limit;
mod handshake;
mod hosts;
pub mod launch;
mod link;
pub mod logging;
mod mesh;
mod millis;
pub mod nccl;
mod net;
mod partition;
mod reduce;
mod rendezvous;
mod rendezvous_service;
mod shm;
mod spin;
mod tcp;
mod tls;
mod wire;

pub use collectives::{AllreduceOptions, Compression};
pub use communicator::Communicator;
pub use config::{CommConfig, TransportPolicy};
pub use dtype::DataType;
pub use engine::{DeviceBuffer, Engine, EngineConfig, Handle, Operation, Output, Payload, Request};
pub use error::{Error, Result};
pub use launch::settings::tls_setting;
pub use nccl::NcclCommunicator;
pub use reduce::{Element, ReduceOp};
pub use rendezvous::{connect, Listener};
pub use rendezvous_service::{
    exchange_entries, rank_zero_candidates, rank_zero_ports, RendezvousService,
};
pub use tls::TLS_VARIABLE;

/// The half-precision element types, from the `half` crate.
pub use half::{bf16, f16};
