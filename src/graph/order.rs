//! The topological order `finalize` computes, and how a cycle is named when there is none.

/// Depth-first search over predecessors, roots taken in id order: the result is the insertion
/// order itself whenever that order is already topological, which keeps a caller's memory-friendly
/// order intact. Iterative, so a chain of a million nodes does not overflow the stack. On a cycle,
/// returns its nodes in edge direction, the first repeated at the end.
pub(super) fn topological_order(
    n: usize,
    input_start: &[u32],
    producer: &dyn Fn(usize) -> u32,
) -> std::result::Result<Vec<u32>, Vec<u32>> {
    const WHITE: u8 = 0;
    const GREY: u8 = 1; // on the stack
    const BLACK: u8 = 2; // ordered
    let mut state = vec![WHITE; n];
    let mut order = Vec::with_capacity(n);
    // (node, next input slot to look at)
    let mut stack: Vec<(u32, u32)> = Vec::new();
    for root in 0..n {
        if state[root] != WHITE {
            continue;
        }
        state[root] = GREY;
        stack.push((root as u32, input_start[root]));
        while let Some(top) = stack.last_mut() {
            let (v, slot) = *top;
            if slot < input_start[v as usize + 1] {
                top.1 += 1;
                let p = producer(slot as usize);
                match state[p as usize] {
                    WHITE => {
                        state[p as usize] = GREY;
                        stack.push((p, input_start[p as usize]));
                    }
                    GREY => {
                        // The stack holds p, then a chain of predecessors ending at v, and p
                        // feeds v: reversed, that chain is the cycle in edge direction.
                        let at = stack
                            .iter()
                            .rposition(|&(u, _)| u == p)
                            .expect("grey nodes are on the stack");
                        let mut cycle = vec![p];
                        cycle.extend(stack[at + 1..].iter().rev().map(|&(u, _)| u));
                        cycle.push(p);
                        return Err(cycle);
                    }
                    _ => {}
                }
            } else {
                state[v as usize] = BLACK;
                order.push(v);
                stack.pop();
            }
        }
    }
    Ok(order)
}

/// Joins names with arrows, eliding the middle of very long cycles.
pub(super) fn shorten(names: &[String]) -> String {
    const SHOWN: usize = 12;
    if names.len() <= SHOWN {
        return names.join(" -> ");
    }
    format!(
        "{} -> ... ({} more) ... -> {}",
        names[..SHOWN / 2].join(" -> "),
        names.len() - SHOWN,
        names[names.len() - SHOWN / 2..].join(" -> ")
    )
}
