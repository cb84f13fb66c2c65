//! A graph from a file ready to run: built with measuring kernels, its inputs filled and their
//! checksums recorded. What every test, benchmark and `gsched` subcommand starts from.

use std::sync::Arc;
use std::time::Duration;

use graphsched::{run, Executor, Graph, InputBinding, Pool, RunOptions};

use crate::graph_file::{GraphFile, InputBuffers};
use crate::kernels::{checksum, Ledger};

/// How the measuring kernels spend their time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Touch every byte and return: durations follow the bytes.
    Touch,
    /// Touch every byte, then spin until the node's estimate has passed: durations follow the
    /// file's estimates (or the cost model's), for scheduling experiments.
    Estimate,
}

/// A built graph, the ledger its kernels check against, and the memory of its inputs.
pub struct Measured {
    pub ledger: Arc<Ledger>,
    pub graph: Arc<Graph>,
    /// The graph inputs' memory, filled from the seed (empty if built without inputs).
    pub inputs: InputBuffers,
}

impl Measured {
    /// Builds `file` with measuring kernels and fills its inputs from `seed`; `None` makes no
    /// input memory (for analysis and simulation, which never bind).
    pub fn build(file: &GraphFile, pace: Pace, seed: Option<u64>) -> Result<Measured, String> {
        let ledger = Ledger::new(&file.value_counts());
        let loaded = file.build(&mut |site| {
            let spin = (pace == Pace::Estimate).then(|| Duration::from_nanos(site.estimate_ns));
            ledger.kernel(site.inputs.to_vec(), spin)
        })?;
        let inputs = match seed {
            Some(seed) => InputBuffers::new(&loaded.inputs, seed),
            None => InputBuffers::new(&[], 0),
        };
        for (v, bytes) in inputs.bytes() {
            ledger.record(v, checksum(bytes));
        }
        Ok(Measured {
            ledger,
            graph: loaded.graph,
            inputs,
        })
    }

    /// Bindings of every graph input to its memory, for `RunOptions::inputs`.
    pub fn bindings(&self) -> Vec<InputBinding<'_>> {
        self.inputs.bindings()
    }

    /// The pool's peak reserved bytes in a steady run: the third on a fresh pool (the first two
    /// settle it), without an executor or on one. What the memory figures of issue 13 compare
    /// with the max-live bound.
    pub fn steady_peak_reserved(&self, executor: Option<&Executor>) -> Result<u64, graphsched::Error> {
        let pool = Arc::new(Pool::default());
        let bindings = self.bindings();
        let options = RunOptions {
            inputs: &bindings,
            executor,
            // On the executor's threads whatever the kernels take.
            force_executor: executor.is_some(),
            ..Default::default()
        };
        for _ in 0..2 {
            drop(run(&self.graph, &pool, &options)?);
        }
        pool.reset_peaks();
        drop(run(&self.graph, &pool, &options)?);
        Ok(pool.stats().peak_reserved_bytes)
    }
}
