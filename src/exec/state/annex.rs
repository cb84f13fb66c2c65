//! What a graph keeps for its runs, in its annex (`Graph::annex`): what every run starts from
//! (per node a [`Step`], per value its initial reference count), whether the graph is a chain,
//! the places of its large values (`HintCache`), its own plans, and its spare arrays, which it
//! lends to one run at a time ([`Lent`]).

use crate::exec::state::arrays::{RunArrays, SpareArrays};
use std::ops::Range;

use crate::exec::memory::cache::CACHE_MAX_BYTES;
use crate::exec::memory::hints::{HintCache, HINT_MIN_BYTES};
use crate::exec::run::auto_plan::AutoPlans;
use crate::graph::{Annex, Graph};
use crate::kernel::CKernel;

/// The graph's spare arrays, and what every run starts from.
struct Bin {
    /// Per value: readers, plus one for a graph output.
    initial_refs: Box<[u32]>,
    /// Per node: what executing it needs, in one record.
    steps: Box<[Step]>,
    /// Where runs ask the pool for their large blocks (made at the first run that needs them).
    hints: HintCache,
    /// The graph's own plans (`RunOptions::auto_plan`).
    plans: AutoPlans,
    /// No two of its operator nodes can ever be ready at once (see [`is_chain`]).
    chain: bool,
    arrays: SpareArrays,
}

/// What executing one node needs of its graph, in one record: read once per node instead of
/// from a handful of the graph's arrays.
#[derive(Clone, Copy, Default)]
pub(in crate::exec) struct Step {
    /// Its outputs are values `first..first + outputs`.
    pub first: u32,
    pub outputs: u32,
    /// Its inputs are entries `input_start..input_end` of the graph's list of every node's
    /// inputs (and of `RunArrays::inputs`).
    pub input_start: u32,
    pub input_end: u32,
    /// Its outputs can take the short path (`RunState::place_plain`): each statically sized and
    /// small enough for the threads' caches but not empty, none in place, none cleared.
    pub plain: bool,
    /// One of its outputs has no reader and is no graph output: it goes as the node ends.
    pub unread: bool,
    /// One of its outputs is counted down by its readers (two reads or more, a graph output's
    /// place in the result one of them): the node sets its count as it ends (`RunState::refs`).
    pub counted: bool,
    /// One of its inputs is read by another node too (or is a graph output): on an executor's
    /// threads the node counts its outputs live before it lets go of its inputs (`end_node_ok`).
    pub shares_input: bool,
    /// One of its outputs is large enough for a hint (`Hints`): the short path, which takes
    /// every block from the thread's cache, is not for it in a run with hints.
    pub hinted: bool,
    /// The size of its first output if the node is plain, else 0 (what the short path hands
    /// out, read here rather than from the graph's sizes).
    pub first_bytes: u32,
    /// Its kernel's C function, if it is one (as `Graph::c_kernel`): the short path calls it
    /// from this record.
    pub c_kernel: Option<CKernel>,
    /// Its op type (`Graph::op_index`), which decides whether a call is timed.
    pub op: u32,
}

impl Step {
    pub(crate) fn values(&self) -> Range<u32> {
        self.first..self.first + self.outputs
    }

    pub(crate) fn inputs(&self) -> Range<usize> {
        self.input_start as usize..self.input_end as usize
    }
}

/// What every run of `graph` starts from: per node, what executing it needs (see [`Step`]);
/// per value, its readers plus one for a graph output (its reference count's start).
pub(in crate::exec) fn templates(graph: &Graph) -> (&[Step], &[u32]) {
    let bin = bin(graph);
    (&bin.steps, &bin.initial_refs)
}

/// The graph's cache of [`Hints`](crate::exec::memory::hints::Hints).
pub(in crate::exec) fn hint_cache(graph: &Graph) -> &HintCache {
    &bin(graph).hints
}

/// Whether no two operator nodes of `graph` can ever be ready at once: each one in the
/// topological order reads an output of the one before it (so nothing can start before its
/// predecessor in the order ends). Such a graph, a chain or a single node, gains nothing from
/// an executor's threads.
pub(in crate::exec) fn is_chain(graph: &Graph) -> bool {
    bin(graph).chain
}

/// The graph's own plans (see [`auto_plan`](crate::exec::run::auto_plan)).
pub(in crate::exec) fn auto_plans(graph: &Graph) -> &AutoPlans {
    &bin(graph).plans
}

fn bin(graph: &Graph) -> &Bin {
    // A value's reads: its readers, plus one for a graph output's place in the result.
    let reads = |v: u32| graph.consumers(v) + graph.is_graph_output(v) as u32;
    let step = |node: u32| {
        let values = graph.node_values(node);
        let inputs = graph.node_input_range(node);
        let plain = !graph.is_graph_input(node)
            && graph.in_place(node).is_none()
            && !graph.zero_output(node)
            && values.clone().all(|v| {
                graph
                    .value_size(v)
                    .bytes()
                    .is_some_and(|n| n > 0 && n <= CACHE_MAX_BYTES)
            });
        Step {
            first: values.start,
            outputs: values.len() as u32,
            input_start: inputs.start as u32,
            input_end: inputs.end as u32,
            plain,
            unread: values
                .clone()
                .any(|v| graph.consumers(v) == 0 && !graph.is_graph_output(v)),
            counted: values.clone().any(|v| reads(v) > 1),
            shares_input: {
                // Reads beyond this node's own (a node may read one value twice).
                let own = &graph.input_values()[inputs.clone()];
                own.iter()
                    .any(|&v| reads(v) > own.iter().filter(|&&x| x == v).count() as u32)
            },
            hinted: values
                .clone()
                .any(|v| graph.value_size(v).bytes().is_some_and(|n| n >= HINT_MIN_BYTES)),
            // Plain outputs are at most `CACHE_MAX_BYTES`: a u32.
            first_bytes: match values.start < values.end && plain {
                true => graph.value_size(values.start).bytes().unwrap_or(0) as u32,
                false => 0,
            },
            c_kernel: graph.c_kernel(node).copied(),
            op: graph.op_index(node),
        }
    };
    graph.annex(Annex::Runs, || Bin {
        initial_refs: (0..graph.value_count() as u32).map(reads).collect(),
        steps: (0..graph.node_count() as u32).map(step).collect(),
        hints: HintCache::default(),
        plans: AutoPlans::default(),
        arrays: SpareArrays::default(),
        chain: chain(graph),
    })
}

/// See [`is_chain`].
fn chain(graph: &Graph) -> bool {
    let mut operators = graph
        .topological_order()
        .iter()
        .filter(|&&node| !graph.is_graph_input(node));
    let Some(&first) = operators.next() else {
        return true;
    };
    let mut before = first;
    operators.all(|&node| {
        let follows = graph
            .node_inputs(node)
            .iter()
            .any(|&v| graph.value_producer(v) == before);
        before = node;
        follows
    })
}

/// Arrays for a new run of `graph`: spare ones if a run left some, else new (without block
/// caches: [`RunArrays::fit_caches`]). Their counters start over in [`RunArrays::reset`].
fn take(graph: &Graph) -> Box<RunArrays> {
    bin(graph).arrays.take().unwrap_or_else(|| RunArrays::new(graph))
}

/// Keeps the arrays for the next run of `graph`. Every slot must be empty.
pub(in crate::exec) fn give_back(arrays: Box<RunArrays>, graph: &Graph) {
    if arrays.slots.len() != graph.value_count() {
        return; // not arrays of this graph's runs (none yet: the run took none)
    }
    bin(graph).arrays.keep(arrays);
}

/// Arrays lent to a run of `graph` (`take`): the run's state borrows them while it
/// lives (`RunState::new`), and then they go to the run's result (`keep`) or, the run having
/// failed, back to the graph when this drops (the state's drop emptied every slot first).
pub(in crate::exec) struct Lent<'g> {
    arrays: Option<Box<RunArrays>>,
    graph: &'g Graph,
}

impl<'g> Lent<'g> {
    pub(crate) fn take(graph: &'g Graph) -> Self {
        Lent {
            arrays: Some(take(graph)),
            graph,
        }
    }

    /// The arrays, to be held by the run's result.
    pub(crate) fn keep(mut self) -> Box<RunArrays> {
        self.arrays.take().expect("lent arrays are kept once")
    }
}

impl std::ops::Deref for Lent<'_> {
    type Target = RunArrays;
    fn deref(&self) -> &RunArrays {
        self.arrays.as_deref().expect("lent arrays are there until kept")
    }
}

impl std::ops::DerefMut for Lent<'_> {
    fn deref_mut(&mut self) -> &mut RunArrays {
        self.arrays.as_deref_mut().expect("lent arrays are there until kept")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(arrays) = self.arrays.take() {
            give_back(arrays, self.graph);
        }
    }
}
