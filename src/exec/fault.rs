//! Fault injection, for tests of what a run does when its own code fails (not a kernel): the
//! run's bookkeeping after a named node panics, as an internal bug would. Compiled only with the
//! `fault-injection` feature; armed, it costs one relaxed load per node.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::graph::Graph;

/// Whether `NODE` holds a name; Release when set, so a run that reads it (Acquire, or Relaxed
/// then the lock) finds the name. Relaxed on the hot path: a stale `false` only delays a fault.
static ARMED: AtomicBool = AtomicBool::new(false);
static NODE: Mutex<Option<String>> = Mutex::new(None);

/// Makes every run panic inside its own bookkeeping right after a node of this name finishes
/// its kernel, in any graph of the process; `None` disarms. For tests only: pick a name no
/// other graph uses.
#[doc(hidden)]
pub fn panic_after_node(name: Option<&str>) {
    let mut node = NODE.lock().unwrap_or_else(|e| e.into_inner());
    *node = name.map(str::to_owned);
    ARMED.store(name.is_some(), Ordering::Release);
}

/// Panics if a test armed a fault for this node.
#[inline]
pub(in crate::exec) fn check(graph: &Graph, node: u32) {
    if ARMED.load(Ordering::Relaxed) {
        check_armed(graph, node);
    }
}

#[cold]
fn check_armed(graph: &Graph, node: u32) {
    let armed = NODE.lock().unwrap_or_else(|e| e.into_inner());
    if armed.as_deref() == Some(graph.node_name(node)) {
        panic!("injected fault after node '{}'", graph.node_name(node));
    }
}
