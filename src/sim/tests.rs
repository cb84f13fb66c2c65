//! The simulator's figures on small graphs whose answers are known.

use super::*;
use crate::graph::{GraphBuilder, NodeDesc, ValueRef};

fn node(name: &str, est: u64, bytes: usize, inputs: &[u32]) -> NodeDesc {
    let mut d = NodeDesc::new(name, "Op", Box::new(|_| Ok(())))
        .output(bytes)
        .estimate_ns(est);
    for &i in inputs {
        d = d.input(ValueRef::new(i, 0));
    }
    d
}

fn add(b: &mut GraphBuilder, name: &str, est: u64, bytes: usize, inputs: &[u32]) -> u32 {
    b.add_node(node(name, est, bytes, inputs)).unwrap()
}

fn opts(threads: usize, policy: Policy, window: usize, memory_limit_bytes: u64) -> SimOptions {
    SimOptions {
        threads,
        policy,
        window,
        memory_limit_bytes,
    }
}

fn sim(g: &Graph, threads: usize, policy: Policy) -> SimResult {
    simulate(g, &opts(threads, policy, 0, 0)).unwrap()
}

const POLICIES: [Policy; 3] = [Policy::CriticalPath, Policy::Fifo, Policy::BottomLevel];

#[test]
fn zero_threads_is_refused() {
    let mut b = GraphBuilder::new();
    add(&mut b, "a", 1, 8, &[]);
    let g = b.finalize().unwrap();
    let e = simulate(&g, &opts(0, Policy::CriticalPath, 0, 0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(e.message(), "threads must be at least 1");
    let r = simulate(&g, &SimOptions::default()).unwrap();
    assert_eq!((r.makespan_ns, r.nodes_run, r.utilization), (1, 1, 1.0));
}

#[test]
fn a_chain_takes_the_sum_of_its_estimates_on_any_thread_count() {
    let mut b = GraphBuilder::new();
    let input = b.add_input("x", 1 << 20).unwrap();
    let mut prev = add(&mut b, "n0", 3, 64, &[input.node]);
    let mut sum = 3;
    for i in 1..20u64 {
        let est = 1 + (7 * i) % 13;
        sum += est;
        prev = add(&mut b, &format!("n{i}"), est, 64, &[prev]);
    }
    b.mark_output(ValueRef::new(prev, 0)).unwrap();
    let g = b.finalize().unwrap();
    for threads in [1, 2, 3, 8, 64] {
        for policy in POLICIES {
            let r = sim(&g, threads, policy);
            assert_eq!(r.makespan_ns, sum, "{threads} threads, {policy:?}");
            assert_eq!((r.critical_path_ns, r.work_ns, r.makespan_lb_ns), (sum, sum, sum));
            assert_eq!(r.nodes_run, 20);
            // Two neighbours live while the second runs; the 1 MiB input is the caller's.
            assert_eq!(r.peak_live_bytes, 128);
            let expected = 1.0 / threads as f64;
            assert!((r.utilization - expected).abs() < 1e-12, "{}", r.utilization);
        }
    }
}

#[test]
fn independent_equal_nodes_run_in_waves() {
    let (k, d) = (10u64, 7u64);
    let mut b = GraphBuilder::new();
    for i in 0..k {
        add(&mut b, &format!("n{i}"), d, 8, &[]);
    }
    let g = b.finalize().unwrap();
    for threads in 1..=12u64 {
        for policy in POLICIES {
            let r = sim(&g, threads as usize, policy);
            assert_eq!(r.makespan_ns, k.div_ceil(threads) * d, "{threads} threads, {policy:?}");
            assert_eq!(r.makespan_lb_ns, d.max((k * d).div_ceil(threads)));
            assert_eq!(r.peak_live_bytes, 8 * k.min(threads));
        }
    }
}

#[test]
fn critical_path_first_beats_fifo_on_a_fork_join() {
    // Three short nodes come first in id (and topological) order, so FIFO starts two of them
    // before the long chain's head; critical-path order starts the chain at once.
    let mut b = GraphBuilder::new();
    let shorts: Vec<u32> = (0..3).map(|i| add(&mut b, &format!("s{i}"), 5, 8, &[])).collect();
    let c1 = add(&mut b, "c1", 10, 8, &[]);
    let c2 = add(&mut b, "c2", 10, 8, &[c1]);
    let c3 = add(&mut b, "c3", 10, 8, &[c2]);
    let join = add(&mut b, "join", 1, 8, &[shorts[0], shorts[1], shorts[2], c3]);
    b.mark_output(ValueRef::new(join, 0)).unwrap();
    let g = b.finalize().unwrap();
    let cp = sim(&g, 2, Policy::CriticalPath);
    let fifo = sim(&g, 2, Policy::Fifo);
    assert_eq!((cp.critical_path_ns, cp.work_ns, cp.makespan_lb_ns), (31, 46, 31));
    assert_eq!(cp.makespan_ns, 31, "the chain never waits");
    assert_eq!(fifo.makespan_ns, 36, "the chain's head waits for two short nodes");
    assert_eq!(fifo.makespan_lb_ns, 31);
    assert!((cp.utilization - 46.0 / 62.0).abs() < 1e-12);
}

#[test]
fn a_window_caps_nodes_in_flight() {
    let mut b = GraphBuilder::new();
    let mut sum = 0;
    for i in 0..16u64 {
        let est = 1 + (i * 5) % 11;
        sum += est;
        add(&mut b, &format!("n{i}"), est, 8, &[]);
    }
    let g = b.finalize().unwrap();
    for policy in POLICIES {
        let serial = simulate(&g, &opts(8, policy, 1, 0)).unwrap();
        assert_eq!(serial.makespan_ns, sum);
        assert_eq!(serial.peak_live_bytes, 8);
        assert!(serial.makespan_lb_ns < sum, "the bound still counts 8 threads");
        let four = simulate(&g, &opts(8, policy, 4, 0)).unwrap();
        assert_eq!(four.makespan_ns, sim(&g, 4, policy).makespan_ns);
        assert!(four.makespan_ns < sim(&g, 3, policy).makespan_ns);
        let wide = simulate(&g, &opts(2, policy, 100, 0)).unwrap();
        assert_eq!(
            wide,
            sim(&g, 2, policy),
            "a window wider than the threads changes nothing"
        );
    }
}

/// `a` feeds two branches of a 1000-byte node then a 100-byte node; `j` joins them.
fn two_branches() -> Graph {
    let mut b = GraphBuilder::new();
    let a = add(&mut b, "a", 10, 100, &[]);
    let b1 = add(&mut b, "b1", 10, 1000, &[a]);
    let b2 = add(&mut b, "b2", 10, 100, &[b1]);
    let c1 = add(&mut b, "c1", 10, 1000, &[a]);
    let c2 = add(&mut b, "c2", 10, 100, &[c1]);
    let j = add(&mut b, "j", 1, 10, &[b2, c2]);
    b.mark_output(ValueRef::new(j, 0)).unwrap();
    b.finalize().unwrap()
}

#[test]
fn a_memory_limit_serializes_wide_branches() {
    let g = two_branches();
    let free = sim(&g, 2, Policy::CriticalPath);
    assert_eq!((free.makespan_ns, free.peak_live_bytes), (31, 2200));
    let tight = simulate(&g, &opts(2, Policy::CriticalPath, 0, 1300)).unwrap();
    // b1 and c1 cannot be live together: one branch at a time.
    assert_eq!((tight.makespan_ns, tight.peak_live_bytes), (51, 1200));
    assert!(tight.makespan_ns > free.makespan_ns);
    for limit in (1200..=2400).step_by(50) {
        for policy in POLICIES {
            let r = simulate(&g, &opts(2, policy, 0, limit)).unwrap();
            assert!(r.peak_live_bytes <= limit, "peak {} over {limit}", r.peak_live_bytes);
            assert!((31..=51).contains(&r.makespan_ns), "{}", r.makespan_ns);
        }
    }
    let same = simulate(&g, &opts(2, Policy::CriticalPath, 0, 2200)).unwrap();
    assert_eq!(same, free, "a limit at the free run's peak changes nothing");
}

#[test]
fn a_node_that_fits_goes_ahead_of_one_that_does_not() {
    // Rank order: big (slack 0), hold, reader (slack 9), small (slack 18).
    let mut b = GraphBuilder::new();
    let hold = add(&mut b, "hold", 1, 600, &[]);
    add(&mut b, "reader", 10, 8, &[hold]);
    add(&mut b, "big", 20, 500, &[]);
    add(&mut b, "small", 2, 100, &[]);
    let g = b.finalize().unwrap();
    let free = sim(&g, 2, Policy::CriticalPath);
    // t=0 big and hold; t=1 reader (500 + 600 + 8 live); t=11 small; big ends at 20.
    assert_eq!((free.makespan_ns, free.peak_live_bytes), (20, 1108));
    // The safe order is the file's (hold, reader, big, small: 608 bytes at most). At t=0 big
    // (500) would fit, but ahead of that order it leaves 392 bytes of slack at hold's and
    // reader's steps: admission turns it away. Hold starts, and small (100 fits in the 392)
    // goes ahead. Reader follows at t=1 (600 + 8 + 100 live); big once hold's value is
    // freed at t=11, ending at 31.
    let r = simulate(&g, &opts(2, Policy::CriticalPath, 0, 1000)).unwrap();
    assert_eq!((r.makespan_ns, r.peak_live_bytes, r.nodes_run), (31, 708, 4));
}

#[test]
fn memory_limit_errors_name_the_node_and_the_bytes() {
    let g = two_branches();
    let e = simulate(&g, &opts(2, Policy::CriticalPath, 0, 900)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MemoryLimit);
    assert!(e.message().contains("'b1' (op Op)"), "{}", e.message());
    assert!(e.message().contains("1000 bytes"), "{}", e.message());
    assert!(e.message().contains("900-byte memory limit"), "{}", e.message());
    // b1's 1000 bytes and a's 100 stay live until b2 or c1 runs, and neither fits next to them.
    let e = simulate(&g, &opts(2, Policy::CriticalPath, 0, 1150)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MemoryLimit);
    assert_eq!(
        e.message(),
        "node 'b2' (op Op) needs 100 bytes for its outputs, but 1100 of the 1150-byte memory limit are live \
         and nothing else is running to free them"
    );
}

#[test]
fn graph_outputs_stay_live_and_unread_values_go_with_their_producer() {
    let mut b = GraphBuilder::new();
    let x = b.add_input("x", 1 << 20).unwrap();
    let p = b
        .add_node(
            NodeDesc::new("p", "Op", Box::new(|_| Ok(())))
                .input(x)
                .output(1000)
                .output(500)
                .estimate_ns(1),
        )
        .unwrap();
    let q = add(&mut b, "q", 1, 1000, &[p]);
    let r = b.add_node(node("r", 1, 1000, &[q]).dynamic_output()).unwrap();
    b.mark_output(ValueRef::new(p, 0)).unwrap();
    b.mark_output(ValueRef::new(r, 0)).unwrap();
    let g = b.finalize().unwrap();
    // r starts with p's output (held), q's (r reads it) and its own: 3000. Without the hold
    // it would be 2000; without releasing p's unread 500 bytes, 3500.
    let res = sim(&g, 1, Policy::CriticalPath);
    assert_eq!(res.peak_live_bytes, 3000);
    assert_eq!(res.makespan_ns, 3);
    let e = simulate(&g, &opts(1, Policy::CriticalPath, 0, 2999)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MemoryLimit);
    assert!(e.message().contains("'r'"), "{}", e.message());
    assert!(e.message().contains("2000 of the 2999-byte"), "{}", e.message());
}

/// xorshift64*: seeded, so every failure reproduces.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

fn random_dag(seed: u64) -> (Graph, u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut b = GraphBuilder::new();
    let mut values: Vec<ValueRef> = (0..rng.below(3))
        .map(|i| b.add_input(&format!("in{i}"), 1 + rng.below(4096) as usize).unwrap())
        .collect();
    let ops = 1 + rng.below(40);
    for i in 0..ops {
        let est = if rng.below(8) == 0 { 0 } else { 1 + rng.below(100) };
        let mut d = NodeDesc::new(format!("n{i}"), "Op", Box::new(|_| Ok(()))).estimate_ns(est);
        for _ in 0..rng.below(4).min(values.len() as u64) {
            // Mostly recent values, so the graphs have some depth.
            let back = rng.below(values.len().min(8) as u64) as usize;
            d = d.input(values[values.len() - 1 - back]);
        }
        for _ in 0..1 + rng.below(2) {
            d = if rng.below(6) == 0 {
                d.dynamic_output()
            } else {
                d.output(1 + rng.below(1000) as usize)
            };
        }
        let outputs = d.outputs.len() as u32;
        let id = b.add_node(d).unwrap();
        for k in 0..outputs {
            values.push(ValueRef::new(id, k));
            if rng.below(10) == 0 {
                b.mark_output(ValueRef::new(id, k)).unwrap();
            }
        }
    }
    (b.finalize().unwrap(), ops)
}

#[test]
fn random_dags_respect_the_bounds() {
    let mut limited_ok = 0;
    for seed in 0..300 {
        let (g, ops) = random_dag(seed);
        for threads in 1..=8usize {
            for policy in POLICIES {
                let r = sim(&g, threads, policy);
                let ctx = format!("seed {seed}, {threads} threads, {policy:?}: {r:?}");
                let (t, w, c) = (threads as u64, r.work_ns, r.critical_path_ns);
                assert_eq!(r.nodes_run, ops, "{ctx}");
                assert!(r.makespan_ns >= r.makespan_lb_ns, "{ctx}");
                // Graham: a greedy schedule is within work/t + (1 - 1/t) * critical path.
                assert!(t * r.makespan_ns <= w + (t - 1) * c, "{ctx}");
                if threads == 1 {
                    assert_eq!((r.makespan_ns, r.makespan_lb_ns), (w, w), "{ctx}");
                }
                assert_eq!(simulate(&g, &opts(threads, policy, 0, 0)).unwrap(), r, "{ctx}");
                if r.peak_live_bytes == 0 {
                    continue;
                }
                // At or above the safe order's bound admission guarantees completion; below
                // it a run may fail, only with a memory-limit error.
                let bound = g.lowest_live_order().peak;
                let limits = [
                    r.peak_live_bytes,
                    r.peak_live_bytes * 3 / 4,
                    r.peak_live_bytes / 2,
                    bound,
                ];
                for limit in limits.map(|l| l.max(1)) {
                    match simulate(&g, &opts(threads, policy, 0, limit)) {
                        Ok(tight) => {
                            assert!(tight.peak_live_bytes <= limit, "{ctx}, limit {limit}: {tight:?}");
                            assert!(tight.makespan_ns >= tight.makespan_lb_ns, "{ctx}");
                            assert_eq!(tight.nodes_run, ops, "{ctx}");
                            limited_ok += 1;
                        }
                        Err(e) => {
                            assert_eq!(e.kind(), ErrorKind::MemoryLimit, "{ctx}: {e}");
                            assert!(limit < bound, "{ctx}: limit {limit} >= bound {bound}: {e}");
                        }
                    }
                }
            }
        }
    }
    assert!(limited_ok > 500, "only {limited_ok} limited runs succeeded");
}

/// Nodes of op type "Op" with no estimate of their own, so that what runs learn applies.
fn learned_graph(count: usize, chained: bool) -> Graph {
    let mut b = GraphBuilder::new();
    let mut prev = None;
    for i in 0..count {
        let mut d = NodeDesc::new(format!("n{i}"), "Op", Box::new(|_| Ok(()))).output(8);
        if let Some(p) = prev.filter(|_| chained) {
            d = d.input(ValueRef::new(p, 0));
        }
        prev = Some(b.add_node(d).unwrap());
    }
    b.finalize().unwrap()
}

#[test]
fn a_parallel_node_divides_its_work_among_the_free_threads() {
    // Four chained nodes whose loops ran on 2 threads for 100 ns: 200 ns of work each.
    let g = learned_graph(4, true);
    let sample = crate::sched::Sample {
        ns: 100,
        thread_ns: None,
        width: 2,
    };
    g.learn_sample(0, sample);
    assert_eq!(g.node_kind(0), crate::sched::NodeKind::Parallel);
    assert_eq!((g.expected_ns(0), g.work_ns(0)), (100, 200));
    for (threads, makespan) in [(1, 800), (2, 400), (4, 200), (3, 4 * 67)] {
        let r = sim(&g, threads, Policy::CriticalPath);
        assert_eq!(r.makespan_ns, makespan, "{threads} threads");
        assert_eq!(r.work_ns, 800);
        assert!(
            r.makespan_lb_ns <= r.makespan_ns && r.makespan_lb_ns >= 800 / threads as u64,
            "{r:?}"
        );
    }
    // Beside a serial chain, a parallel node gets only the threads nobody else holds.
    let mut b = GraphBuilder::new();
    let par = b
        .add_node(NodeDesc::new("par", "Par", Box::new(|_| Ok(()))).output(8))
        .unwrap();
    b.add_node(node("serial", 300, 8, &[])).unwrap();
    let g = b.finalize().unwrap();
    g.learn_sample(
        par,
        crate::sched::Sample {
            ns: 150,
            thread_ns: None,
            width: 2,
        },
    );
    // 2 threads: the serial node (longer path) starts first; "par" runs alone on the other.
    let r = sim(&g, 2, Policy::CriticalPath);
    assert_eq!(r.makespan_ns, 300);
    assert!(r.makespan_lb_ns <= r.makespan_ns);
}

#[test]
fn a_deferring_node_frees_its_thread_but_not_its_window_place() {
    // Four independent nodes: 100 ns from start to completion, 10 of them on a thread.
    let g = learned_graph(4, false);
    g.learn_sample(
        0,
        crate::sched::Sample {
            ns: 100,
            thread_ns: Some(10),
            width: 1,
        },
    );
    assert_eq!(g.node_kind(0), crate::sched::NodeKind::Deferring);
    assert_eq!(g.work_ns(0), 10);
    // One thread launches all four 10 ns apart; the last completes at 130.
    let r = sim(&g, 1, Policy::CriticalPath);
    assert_eq!((r.makespan_ns, r.work_ns), (130, 40));
    assert!(r.makespan_lb_ns <= r.makespan_ns, "{r:?}");
    // A window of 2 holds two in flight: 0 and 10, then 100 and 110; the last ends at 210.
    let windowed = simulate(&g, &opts(1, Policy::CriticalPath, 2, 0)).unwrap();
    assert_eq!(windowed.makespan_ns, 210);
    // A window as wide as the threads still caps pending nodes.
    let two = simulate(&g, &opts(2, Policy::CriticalPath, 2, 0)).unwrap();
    assert_eq!(two.makespan_ns, 200);
}
