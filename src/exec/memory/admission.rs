//! Memory admission during a run: reservations under the limit, the nodes waiting for memory,
//! and the last task's stall check. Which node may start is `sched::Admission`'s decision.

use std::sync::Mutex;

use crate::error::{err, Error, ErrorKind, Result};
use crate::exec::state::{lock, RunState};
use crate::sched::Admission;

/// Memory admission: the run's live bytes stay under `limit`, and which nodes may start is
/// decided by `sched::Admission` (the banker's rule that guarantees completion at any limit
/// some order meets). Ready nodes it turns away wait in `waiting`, sorted most critical first;
/// every release looks at them again. The reservation and the decision to wait happen under the
/// same lock as that second look, so a node never waits for a release that has already
/// happened: a releaser lowers `live` before it takes the lock, so whoever holds the lock next
/// sees the lower value.
pub(in crate::exec) struct Gate<'r> {
    pub(in crate::exec) limit: u64,
    pub(in crate::exec) inner: Mutex<GateInner<'r>>,
}

pub(in crate::exec) struct GateInner<'r> {
    pub(in crate::exec) waiting: Vec<u32>,
    pub(in crate::exec) admission: Admission<'r>,
}

impl<'r> RunState<'r> {
    /// Admits a ready node under the memory limit: true if it may run now. Without a limit,
    /// always. A node that cannot run now waits until a release makes room.
    #[inline]
    pub(crate) fn admit(&self, node: u32) -> bool {
        match &self.gate {
            None => true,
            Some(gate) => self.admit_gated(gate, node),
        }
    }

    fn admit_gated(&self, gate: &Gate<'_>, node: u32) -> bool {
        let mut inner = lock(&gate.inner);
        if self.try_reserve(&mut inner, Some(node), self.prio.output_bytes[node as usize]) {
            return true;
        }
        let ranks = self.prio.ranks(self.policy);
        let at = inner
            .waiting
            .partition_point(|&w| ranks[w as usize] < ranks[node as usize]);
        inner.waiting.insert(at, node);
        false
    }

    /// Reserves `need` bytes, for `node` to start (asking the admission rule) or for a dynamic
    /// output (`None`: only the limit applies). Under the gate's lock, so the only concurrent
    /// changes to `live` are releases, which lower it: a stale read only errs on the safe side.
    pub(in crate::exec) fn try_reserve(&self, inner: &mut GateInner<'_>, node: Option<u32>, need: u64) -> bool {
        let live = self.tally.live();
        let admitted = match node {
            Some(node) => inner.admission.try_admit(node, need, live),
            None => live.saturating_add(need) <= inner.admission.limit(),
        };
        if admitted {
            // No thread's scratch here: the peak is raised at once (a run under a limit
            // reserves under the gate's lock anyway).
            let mut highest = 0;
            self.add_live(need, &mut highest);
            self.raise_peak(highest);
            // The limit holds: only this lock raises `live` under it (a release only lowers it).
            debug_assert!(
                highest <= inner.admission.limit(),
                "{highest} live bytes admitted under a limit of {}",
                inner.admission.limit()
            );
        }
        admitted
    }

    /// After `freed` values were released: tells admission, then admits waiting nodes that now
    /// fit, most critical first.
    pub(in crate::exec) fn readmit(&self, out: &mut Vec<u32>, freed: &[u32]) {
        let Some(gate) = &self.gate else { return };
        let mut guard = lock(&gate.inner);
        let inner = &mut *guard;
        for &v in freed {
            let static_bytes = crate::graph::memory::value_bytes(self.graph, v);
            inner.admission.release(self.graph.value_producer(v), static_bytes);
        }
        let mut waiting = std::mem::take(&mut inner.waiting);
        waiting.retain(|&node| {
            let fits = self.try_reserve(inner, Some(node), self.prio.output_bytes[node as usize]);
            if fits {
                out.push(node);
            }
            !fits
        });
        inner.waiting = waiting;
    }

    /// Under a memory limit: reserves `bytes` for a dynamic output `node`'s kernel is
    /// allocating, or refuses with a `MemoryLimit` error naming the node and the bytes. Dynamic
    /// sizes are unknown in advance, so they are not part of the completion guarantee (see
    /// `sched::admission`): they are granted while they fit, and refused past the limit.
    pub(in crate::exec) fn reserve_dynamic(&self, node: u32, bytes: u64) -> Result<()> {
        let Some(gate) = &self.gate else { return Ok(()) };
        if self.try_reserve(&mut lock(&gate.inner), None, bytes) {
            return Ok(());
        }
        err(
            ErrorKind::MemoryLimit,
            format!(
                "node {} asked for a {bytes}-byte dynamic output, but {} of the {}-byte memory limit are live",
                self.graph.node_label(node),
                self.tally.live(),
                gate.limit
            ),
        )
    }

    pub(crate) fn has_gate(&self) -> bool {
        self.gate.is_some()
    }

    /// Called by the run's last active task before it finishes: if nodes still wait for memory
    /// that nothing running will release, admit what fits or fail the run naming the culprit.
    pub(crate) fn resolve_stall(&self, out: &mut Vec<u32>) {
        let Some(gate) = &self.gate else { return };
        self.readmit(out, &[]);
        if !out.is_empty() || self.failed() {
            return;
        }
        let inner = lock(&gate.inner);
        if let Some(&node) = inner.waiting.first() {
            let need = self.prio.output_bytes[node as usize];
            let live = self.tally.live();
            drop(inner);
            let label = self.graph.node_label(node);
            let message = if need > gate.limit {
                format!(
                    "node {label} needs {need} bytes for its outputs, more than the whole {}-byte memory limit",
                    gate.limit
                )
            } else {
                let bound = self.graph.lowest_live_order().peak;
                let why = if gate.limit >= bound {
                    "outputs of dynamic size took the room".to_string()
                } else {
                    format!(
                        "the limit is below {bound} bytes, the lowest max-live bound graphsched found for this graph"
                    )
                };
                format!(
                    "node {label} needs {need} bytes for its outputs, but {live} of the {}-byte memory limit are live and \
                     nothing else is running to free them ({why})",
                    gate.limit
                )
            };
            self.fail(Error::new(ErrorKind::MemoryLimit, message));
        }
    }
}
