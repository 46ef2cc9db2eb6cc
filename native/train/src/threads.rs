//! The threads candle's matrix products split over.
//!
//! candle splits a product across rayon's threads. Called from a thread
//! outside any pool, each product hands its parts to rayon's global pool and
//! parks the caller until they are done: at 2 threads that cost the
//! trainer's steps a fifth of their time. Work that runs on a thread of a
//! pool (`ThreadPool::install`) splits its products where it is called.

use crate::error::{Error, Result};

/// A pool of as many threads as candle's products use
/// (`RAYON_NUM_THREADS`, else every core), named `{name}-0`, `{name}-1`...
pub(crate) fn products_pool(name: &'static str) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(candle_core::utils::get_num_threads())
        .thread_name(move |i| format!("{name}-{i}"))
        .build()
        .map_err(Error::from)
}
