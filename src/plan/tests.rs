//! Plans on small graphs: the verifier, foreign graphs, refusals.

use super::*;
use crate::graph::{GraphBuilder, NodeDesc, ValueRef};

/// src -> (x, y) -> join: x and y are live together at join.
fn diamond() -> Arc<Graph> {
    let mut b = GraphBuilder::new();
    let node = |name: &str| NodeDesc::new(name, "Op", Box::new(|_| Ok(())));
    let src = b.add_node(node("src").output(256)).unwrap();
    let x = b.add_node(node("x").input(ValueRef::new(src, 0)).output(128)).unwrap();
    let y = b.add_node(node("y").input(ValueRef::new(src, 0)).output(128)).unwrap();
    let join = b
        .add_node(
            node("join")
                .input(ValueRef::new(x, 0))
                .input(ValueRef::new(y, 0))
                .output(64),
        )
        .unwrap();
    b.mark_output(ValueRef::new(join, 0)).unwrap();
    Arc::new(b.finalize().unwrap())
}

#[test]
fn the_verifier_catches_a_broken_plan() {
    let graph = diamond();
    let mut plan = Plan::new(&graph, Mode::ParallelSafe).unwrap();
    plan.verify().unwrap();
    // Put every value at offset 0: values live at once now overlap.
    for o in plan.offsets.iter_mut().flatten() {
        *o = 0;
    }
    let e = plan.verify().unwrap_err();
    assert!(e.message().contains("share bytes"), "{e}");
    drop(graph);
    let e = plan.verify().unwrap_err();
    assert!(e.message().contains("was dropped"), "{e}");
}

#[test]
fn a_graph_with_too_many_values_live_at_once_is_refused_with_a_sentence() {
    // 4,100 values live at once, each conflicting with every other: 16.8 million entries.
    let mut b = GraphBuilder::new();
    let node = |name: String| NodeDesc::new(name, "Op", Box::new(|_| Ok(()))).output(64);
    let src = b.add_node(node("src".into())).unwrap();
    let wide: Vec<u32> = (0..4100)
        .map(|i| b.add_node(node(format!("w{i}")).input(ValueRef::new(src, 0))).unwrap())
        .collect();
    let mut join = node("join".into());
    for chunk in wide.chunks(crate::graph::MAX_NODE_PORTS) {
        let mut part = node(format!("part{}", chunk[0]));
        for &w in chunk {
            part = part.input(ValueRef::new(w, 0));
        }
        join = join.input(ValueRef::new(b.add_node(part).unwrap(), 0));
    }
    let join = b.add_node(join).unwrap();
    b.mark_output(ValueRef::new(join, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let e = Plan::new(&graph, Mode::Sequential(Order::Topological)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("may be live at once"), "{e}");
}

#[test]
fn a_plan_names_both_graphs_when_given_another() {
    let (a, b) = (diamond(), diamond());
    let plan = Plan::new(&a, Mode::Sequential(Order::Topological)).unwrap();
    plan.check_graph(&a).unwrap();
    let e = plan.check_graph(&b).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        e.message().contains(&format!("graph #{}", a.id())) && e.message().contains(&format!("graph #{}", b.id())),
        "{e}"
    );
}
