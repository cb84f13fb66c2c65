//! Workloads for graphsched: real inference graphs read from files, and kernels that touch
//! their memory for real and check a checksum chain, so a buffer reused too early fails loudly.
//! Tests, benchmarks and the command line share them; the core library does not depend on this
//! crate.

pub mod corpus;
pub mod graph_file;
pub mod kernels;
pub mod measured;
pub mod naive;
pub mod seed;
pub mod svg;
pub mod tune;

pub use graph_file::{GraphFile, LoadedGraph};
pub use kernels::{checksum, Ledger};
pub use measured::{Measured, Pace};
pub use seed::seed_pipeline;

use std::path::PathBuf;

/// The real graphs that ship with the project (`workloads/graphs/`).
pub fn bundled_graphs() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("graphs");
    ["yolov8n-320", "ppocrv4-det-640", "mobilenetv2-224", "resnet50-224"]
        .iter()
        .map(|name| dir.join(format!("{name}.json")))
        .collect()
}
