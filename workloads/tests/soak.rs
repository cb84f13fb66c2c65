//! Soak: a real graph run 10,000 times with one pool and one executor. After the first run the
//! pool's reserved bytes and system allocations stay put, and so does the process's resident
//! memory.

use std::sync::Arc;

use graphsched::{run, Executor, Pool, RunOptions};
use graphsched_workloads::graph_file::InputBuffers;
use graphsched_workloads::{bundled_graphs, GraphFile};

/// Resident set size in bytes, from /proc/self/statm.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn ten_thousand_runs_hold_memory_steady() {
    let path = bundled_graphs()
        .into_iter()
        .find(|p| p.ends_with("mobilenetv2-224.json"))
        .unwrap();
    let file = GraphFile::load(&path).unwrap();
    // Kernels that do nothing: the soak is about the runtime's memory, not the kernels'.
    let loaded = file.build(&mut |_| Box::new(|_| Ok(()))).unwrap();
    let inputs = InputBuffers::new(&loaded.inputs, 1);
    let bindings = inputs.bindings();
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    let options = RunOptions {
        inputs: &bindings,
        executor: Some(&executor),
        // Empty kernels would send the runs to the caller once measured: the soak is of the
        // executor's runs.
        force_executor: true,
        ..Default::default()
    };
    let mut after_first = None;
    let mut rss_early = 0;
    for i in 0..10_000 {
        let result = run(&loaded.graph, &pool, &options).unwrap();
        drop(result);
        let s = pool.stats();
        match i {
            0 => after_first = Some(s),
            100 => rss_early = rss(),
            _ => {}
        }
        if i > 0 && i % 1000 == 0 {
            let first = after_first.unwrap();
            assert_eq!(s.os_allocs, first.os_allocs, "run {i} took memory from the system");
            assert!(
                s.reserved_bytes <= first.peak_reserved_bytes,
                "run {i}: reserved grew past the first run's peak"
            );
        }
    }
    let growth = rss().saturating_sub(rss_early);
    assert!(
        growth < 4 << 20,
        "resident memory grew by {growth} bytes over 9,900 runs"
    );
    assert_eq!(pool.stats().live_bytes, 0);
}
