//! Workloads: a graph file or the seed pipeline, built with the measuring kernels, and the bounds no run can beat.

use std::path::Path;

use graphsched::sched::BoundTerm;
use graphsched::Graph;
use graphsched_workloads::{seed_pipeline, GraphFile, Measured, Pace};
use serde::Serialize;
use serde_json::{json, Value};

use crate::args::WorkloadArgs;
use crate::format::{mb, ms, plural};

/// A graph file or the seed pipeline, with what describes it.
pub(crate) struct Workload {
    pub(crate) file: GraphFile,
    /// What messages call it: the file's path, or "the seed pipeline".
    pub(crate) label: String,
    /// Seed pipeline only.
    pub(crate) scale: Option<f64>,
    pub(crate) seed: Option<u64>,
}

impl Workload {
    pub(crate) fn load(args: &WorkloadArgs, default_scale: f64) -> Result<Workload, String> {
        if args.graph == "seed" {
            return Workload::seed(args.seed.scale.unwrap_or(default_scale), args.seed.seed.unwrap_or(1));
        }
        if args.seed.scale.is_some() || args.seed.seed.is_some() {
            return Err(format!(
                "--scale and --seed apply to the seed pipeline only, not to the graph file {}",
                args.graph
            ));
        }
        let file = GraphFile::load(Path::new(&args.graph))?;
        if file.nodes.is_empty() {
            return Err(format!("{}: the graph file has no nodes", args.graph));
        }
        Ok(Workload {
            file,
            label: args.graph.clone(),
            scale: None,
            seed: None,
        })
    }

    pub(crate) fn seed(scale: f64, seed: u64) -> Result<Workload, String> {
        if !(scale.is_finite() && scale > 0.0 && scale <= 100.0) {
            return Err(format!("--scale must be a number above 0 and at most 100, not {scale}"));
        }
        Ok(Workload {
            file: seed_pipeline(seed, scale),
            label: "the seed pipeline".to_string(),
            scale: Some(scale),
            seed: Some(seed),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.file.name
    }

    pub(crate) fn output_bytes(&self) -> u64 {
        self.file
            .nodes
            .iter()
            .flat_map(|n| &n.outputs)
            .map(|o| o.bytes as u64)
            .sum()
    }

    pub(crate) fn json(&self) -> Value {
        let mut w = json!({
            "name": self.file.name,
            "nodes": self.file.nodes.len(),
            "output_bytes": self.output_bytes(),
            "max_live_bytes": self.file.max_live_bytes(),
        });
        if let (Some(scale), Some(seed)) = (self.scale, self.seed) {
            w["scale"] = json!(scale);
            w["seed"] = json!(seed);
        }
        w
    }

    /// `240 nodes, 1265.4 MB of outputs, 500.1 MB live at most in file order`
    pub(crate) fn figures(&self) -> String {
        format!(
            "{} nodes, {} MB of outputs, {} MB live at most in file order",
            self.file.nodes.len(),
            mb(self.output_bytes()),
            mb(self.file.max_live_bytes())
        )
    }

    /// Builds the graph with measuring kernels (spinning to the estimates); with `bind`, also
    /// makes memory for its inputs.
    pub(crate) fn build(&self, bind: bool) -> Result<Measured, String> {
        let wanted: u64 = self.file.inputs.iter().map(|i| i.bytes as u64).sum();
        let memory = physical_memory();
        if bind && wanted > memory / 2 {
            return Err(format!(
                "{}: the graph inputs take {} MB, more than half of this machine's {} MB of memory",
                self.label,
                mb(wanted),
                mb(memory)
            ));
        }
        Measured::build(&self.file, Pace::Estimate, bind.then_some(1)).map_err(|e| format!("{}: {e}", self.label))
    }
}

/// Bytes of physical memory (u64::MAX if unknown).
pub(crate) fn physical_memory() -> u64 {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    if pages <= 0 || page <= 0 {
        return u64::MAX;
    }
    (pages as u64).saturating_mul(page as u64)
}

/// What no run can beat.
#[derive(Serialize)]
pub(crate) struct Bounds {
    pub(crate) critical_path_ns: u64,
    pub(crate) work_ns: u64,
    /// The largest of: critical path, work / threads, and every node's ancestors' work / threads
    /// plus its longest path (and the mirror): see `graphsched::sched::MakespanBound`.
    pub(crate) makespan_lb_ns: u64,
    /// Which of those terms binds, in words.
    pub(crate) makespan_bound_term: String,
    /// Most bytes live at once running in file order: the sequential memory.
    pub(crate) max_live_lb_bytes: u64,
}

impl Bounds {
    pub(crate) fn new(workload: &Workload, graph: &Graph, threads: u64) -> Bounds {
        let bound = graph.priorities().makespan_bound(threads as usize);
        Bounds {
            critical_path_ns: bound.critical_path_ns,
            work_ns: bound.work_ns,
            makespan_lb_ns: bound.makespan_lb_ns,
            makespan_bound_term: bound_term(graph, bound.binding, threads),
            max_live_lb_bytes: workload.file.max_live_bytes(),
        }
    }

    pub(crate) fn lines(&self, threads: u64) -> String {
        format!(
            "bounds:   critical path {} ms, work {} ms, makespan >= {} ms at {threads} thread{} ({}); memory >= {} MB (max live in file order)\n",
            ms(self.critical_path_ns),
            ms(self.work_ns),
            ms(self.makespan_lb_ns),
            plural(threads as usize),
            self.makespan_bound_term,
            mb(self.max_live_lb_bytes)
        )
    }
}

/// Which term of the makespan bound binds, in words.
pub(crate) fn bound_term(graph: &Graph, term: BoundTerm, threads: u64) -> String {
    match term {
        BoundTerm::CriticalPath => "the critical path".to_string(),
        BoundTerm::Work => format!("work / {threads}"),
        BoundTerm::Before(v) => format!("'{}' waits for its ancestors' work / {threads}", graph.node_name(v)),
        BoundTerm::After(v) => format!("'{}' then its descendants' work / {threads}", graph.node_name(v)),
    }
}
