//! `gsched info`: what a graph is.

use serde_json::json;

use crate::args::InfoArgs;
use crate::format::{mb, ms, plural, to_json, wrap, Table};
use crate::workload::Workload;
use crate::FULL_SCALE;

pub(crate) fn info_command(args: InfoArgs) -> Result<String, String> {
    let workload = Workload::load(&args.workload, FULL_SCALE)?;
    let built = workload.build(false)?;
    let graph = &built.graph;
    let info = graph.info();
    if let Some(path) = &args.dot {
        std::fs::write(path, graphsched::trace::dot(graph))
            .map_err(|e| format!("cannot write the DOT file {}: {e}", path.display()))?;
    }
    let path: Vec<&str> = graph.critical_path().iter().map(|&n| graph.node_name(n)).collect();
    let nodes = info.num_nodes - info.num_inputs;
    let max_live = workload.file.max_live_bytes();
    if args.json {
        return to_json(&json!({
            "workload": workload.json(),
            "nodes": nodes,
            "inputs": info.num_inputs,
            "outputs": info.num_outputs,
            "values": info.num_values,
            "edges": info.num_edges,
            "critical_path": path,
            "critical_path_ns": info.critical_path_ns,
            "work_ns": info.total_work_ns,
            "static_bytes": info.static_bytes,
            "max_live_lb_bytes": max_live,
            "node_lower_bound_bytes": info.node_lower_bound_bytes,
        }));
    }
    let mut out = format!("gsched info: {}\n", workload.name());
    if !workload.file.source.is_empty() {
        out += &format!("source: {}\n", workload.file.source);
    }
    out += "\n";
    let mut t = Table::new(&["", "", ""]);
    t.left_align(2);
    t.push(vec![
        "nodes".into(),
        nodes.to_string(),
        format!(
            "operators; plus {} graph input{}",
            info.num_inputs,
            plural(info.num_inputs as usize)
        ),
    ]);
    t.push(vec![
        "values".into(),
        info.num_values.to_string(),
        format!("{} graph output{}", info.num_outputs, plural(info.num_outputs as usize)),
    ]);
    t.push(vec![
        "edges".into(),
        info.num_edges.to_string(),
        "input slots over all nodes".into(),
    ]);
    t.push(vec![
        "work".into(),
        format!("{} ms", ms(info.total_work_ns)),
        "sum of the estimates".into(),
    ]);
    t.push(vec![
        "critical path".into(),
        format!("{} ms", ms(info.critical_path_ns)),
        format!("{} nodes, listed below", path.len()),
    ]);
    t.push(vec![
        "parallelism".into(),
        format!("{:.2}", info.total_work_ns as f64 / info.critical_path_ns.max(1) as f64),
        "work / critical path: most threads that can help".into(),
    ]);
    t.push(vec![
        "values, in all".into(),
        format!("{} MB", mb(info.static_bytes)),
        "every value at once (graph inputs included)".into(),
    ]);
    t.push(vec![
        "max live".into(),
        format!("{} MB", mb(max_live)),
        "most bytes live at once in file order: the sequential memory".into(),
    ]);
    t.push(vec![
        "single node".into(),
        format!("{} MB", mb(info.node_lower_bound_bytes)),
        "largest inputs + outputs of one node: no order needs less".into(),
    ]);
    out += &t.render();
    out += "\ncritical path:\n";
    out += &wrap(&path.join(" -> "), 100)
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect::<String>();
    if let Some(dot) = &args.dot {
        out += &format!("\nGraphviz DOT written to {} (critical path in red).\n", dot.display());
    }
    Ok(out)
}
