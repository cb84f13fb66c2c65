//! Pictures of graphs and runs: Chrome trace-event JSON of a traced run (opens in Perfetto or
//! chrome://tracing) and Graphviz DOT of a graph.
//!
//! A run with `RunOptions::trace` set records one [`NodeEvent`] per kernel call, as the kernel
//! ends, under a lock shared by the run's threads; the result lists them in the order they ended
//! ([`RunResult::events`](crate::RunResult::events)). Graph inputs never run and have no event.
//! Every time is read from one monotonic clock and counted from the run's start, so events of
//! different threads compare directly. [`chrome_trace`] and [`dot`] only format: they return
//! text and write no file.
//!
//! ```
//! use graphsched::{trace, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};
//! use std::sync::Arc;
//!
//! let mut b = GraphBuilder::new();
//! let node = |name: &str| NodeDesc::new(name, "Op", Box::new(|_| Ok(()))).output(64);
//! let a = b.add_node(node("a")).unwrap();
//! let z = b.add_node(node("z").input(ValueRef::new(a, 0))).unwrap();
//! b.mark_output(ValueRef::new(z, 0)).unwrap();
//! let graph = Arc::new(b.finalize().unwrap());
//! let options = RunOptions { trace: true, ..Default::default() };
//! let result = graphsched::run(&graph, &Arc::new(Pool::default()), &options).unwrap();
//! let events = result.events();
//! assert_eq!(events.iter().map(|e| e.node).collect::<Vec<_>>(), [a, z]);
//! assert!(events[0].end_ns <= events[1].start_ns && events.iter().all(|e| e.thread == 0));
//! assert!(trace::chrome_trace(&graph, events).contains(r#""name":"z""#));
//! assert!(trace::dot(&graph).contains(&format!("n{a} -> n{z}")));
//! ```

use std::fmt::Write;

use crate::graph::Graph;

/// One executed node in a traced run: when, on which thread, and memory once it finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeEvent {
    /// The node, as `GraphBuilder::add_node` numbered it.
    pub node: u32,
    /// 0: a thread that called `run`; i + 1: the executor's worker i.
    pub thread: u32,
    /// Kernel start, in nanoseconds since the run started.
    pub start_ns: u64,
    /// Kernel end, in nanoseconds since the run started; at least `start_ns`. For a node whose
    /// kernel deferred its end (`KernelCtx::defer`), when the kernel returned.
    pub end_ns: u64,
    /// When a deferred node's completion came (at least `end_ns`); 0 for a node that ended with
    /// its kernel.
    pub completed_ns: u64,
    /// Bytes the run held when the kernel ended: outputs reserved, values not yet released.
    pub live_bytes: u64,
    /// The pool's `reserved_bytes` when the kernel ended (the whole pool, other runs included).
    pub reserved_bytes: u64,
}

/// A traced run as Chrome trace-event JSON: one track per thread ("caller", "worker 1", ...),
/// one slice per node with its name, op type and output bytes, and counter tracks for the run's
/// live bytes and the pool's reserved bytes. A deferred node's kernel is a slice on its thread's
/// track as any other, and its time pending, from kernel start to completion, a slice of its own
/// (an async event, category "pending", which viewers draw on a track per node).
pub fn chrome_trace(graph: &Graph, events: &[NodeEvent]) -> String {
    let mut out = String::from("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    let mut threads: Vec<u32> = events.iter().map(|e| e.thread).collect();
    threads.sort_unstable();
    threads.dedup();
    let mut first = true;
    let mut sep = |out: &mut String| {
        if !first {
            out.push_str(",\n");
        }
        first = false;
    };
    for &t in &threads {
        sep(&mut out);
        let name = if t == 0 {
            "caller".to_string()
        } else {
            format!("worker {t}")
        };
        let _ = write!(
            out,
            "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":{t},\"args\":{{\"name\":\"{name}\"}}}}"
        );
    }
    for e in events {
        let bytes: u64 = graph
            .node_values(e.node)
            .map(|v| graph.value_size(v).bytes().unwrap_or(0) as u64)
            .sum();
        sep(&mut out);
        let _ = write!(
            out,
            "{{\"ph\":\"X\",\"pid\":1,\"tid\":{},\"name\":\"{}\",\"cat\":\"{}\",\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"node\":{},\"op\":\"{}\",\"output_bytes\":{}}}}}",
            e.thread,
            escape(graph.node_name(e.node)),
            escape(graph.op_type(e.node)),
            e.start_ns as f64 / 1000.0,
            (e.end_ns - e.start_ns) as f64 / 1000.0,
            e.node,
            escape(graph.op_type(e.node)),
            bytes
        );
        if e.completed_ns != 0 {
            for (phase, ts) in [("b", e.start_ns), ("e", e.completed_ns)] {
                sep(&mut out);
                let _ = write!(
                    out,
                    "{{\"ph\":\"{phase}\",\"pid\":1,\"tid\":{},\"id\":{},\"name\":\"{}\",\"cat\":\"pending\",\"ts\":{:.3}}}",
                    e.thread,
                    e.node,
                    escape(graph.node_name(e.node)),
                    ts as f64 / 1000.0
                );
            }
        }
        sep(&mut out);
        let _ = write!(
            out,
            "{{\"ph\":\"C\",\"pid\":1,\"name\":\"memory\",\"ts\":{:.3},\"args\":{{\"live_bytes\":{},\"reserved_bytes\":{}}}}}",
            e.end_ns.max(e.completed_ns) as f64 / 1000.0,
            e.live_bytes,
            e.reserved_bytes
        );
    }
    out.push_str("\n]}\n");
    out
}

/// The graph as Graphviz DOT: boxes labelled with name and op type, area and colour growing with
/// output bytes, the critical path (under the current estimates) in red.
pub fn dot(graph: &Graph) -> String {
    let prio = graph.priorities();
    let critical = |v: u32| !graph.is_graph_input(v) && prio.slack[v as usize] == 0;
    let bytes = |v: u32| -> u64 {
        graph
            .node_values(v)
            .map(|val| graph.value_size(val).bytes().unwrap_or(0) as u64)
            .sum()
    };
    let largest = (0..graph.node_count() as u32).map(bytes).max().unwrap_or(1).max(1) as f64;
    let mut out = String::from(
        "digraph graphsched {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=\"Helvetica\"];\n",
    );
    for v in 0..graph.node_count() as u32 {
        let share = bytes(v) as f64 / largest; // 0..1
        let width = 0.8 + 2.2 * share.sqrt();
        // From pale yellow (small) to deep orange (largest output).
        let green = (230.0 - 150.0 * share) as u8;
        let blue = (180.0 - 170.0 * share) as u8;
        let _ = writeln!(
            out,
            "  n{v} [label=\"{}\\n{}\\n{} B\", width={width:.2}, fillcolor=\"#ff{green:02x}{blue:02x}\"{}];",
            escape(graph.node_name(v)),
            escape(if graph.is_graph_input(v) {
                "input"
            } else {
                graph.op_type(v)
            }),
            bytes(v),
            if critical(v) { ", color=red, penwidth=3" } else { "" }
        );
    }
    for v in 0..graph.node_count() as u32 {
        let mut seen = Vec::new();
        for &s in graph.successors(v) {
            if seen.contains(&s) {
                continue;
            }
            seen.push(s);
            let on_path = critical(v)
                && critical(s)
                && prio.top_level[s as usize] == prio.top_level[v as usize] + prio.weight[v as usize];
            let _ = writeln!(
                out,
                "  n{v} -> n{s}{};",
                if on_path { " [color=red, penwidth=3]" } else { "" }
            );
        }
    }
    out.push_str("}\n");
    out
}

/// Escapes text for a JSON or DOT string literal.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}
