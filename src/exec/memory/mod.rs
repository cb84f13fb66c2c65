//! The memory of a run: where its values' blocks come from and go back to, and what holds its
//! live bytes under a limit. The per-thread block caches (`cache`), the graph's reserve of small
//! blocks behind them (`reserve`), the places large values are asked for in the pool (`hints`),
//! and memory admission under a limit (`admission`).

pub(in crate::exec) mod admission;
pub(in crate::exec) mod cache;
pub(in crate::exec) mod hints;
pub(in crate::exec) mod reserve;
