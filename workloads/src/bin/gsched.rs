//! `gsched`: graphsched from the command line. Runs the seed pipeline or a graph file with the
//! measuring kernels (every input byte read and checked, every output byte written, each node
//! spinning to its estimate), simulates it, or describes it; prints a table, or one JSON object
//! with `--json`.
//!
//! `cargo run --release --bin gsched -- demo` runs the seed pipeline five ways, from plain malloc
//! to critical-path scheduling under a memory limit, next to the bounds no schedule can beat.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use graphsched::plan::{Mode, Order, Plan};
use graphsched::sched::BoundTerm;
use graphsched::sim::{simulate, SimOptions};
use graphsched::{run, Executor, Graph, Policy, Pool, RunOptions, RunResult};
use graphsched_workloads::graph_file::InputBuffers;
use graphsched_workloads::naive::run_naive;
use graphsched_workloads::{checksum, seed_pipeline, GraphFile, Ledger};
use serde::Serialize;
use serde_json::{json, Value};

/// Seed pipeline scale of `demo` (and of `run seed`): the five strategies take about 18 s in all
/// on the project's 2-core machine.
const DEMO_SCALE: f64 = 0.3;
/// Seed pipeline scale of `simulate seed` and `info seed`, which touch no memory: the full size.
const FULL_SCALE: f64 = 1.0;

#[derive(Parser)]
#[command(
    name = "gsched",
    version,
    about = "graphsched from the command line: run, simulate and describe compute graphs",
    long_about = "graphsched from the command line: run, simulate and describe compute graphs.\n\n\
        A graph is a graph file (the format of workloads/graphs/README.md) or the word `seed`: the \
        seed pipeline (240 nodes, 3 chains with long skip connections, 5 GB of outputs at scale 1). \
        Runs use measuring kernels: every input byte read and checked against its producer's \
        checksum, every output byte written, each node spinning to its estimated duration."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the seed pipeline six ways (malloc, pool, FIFO, critical path, critical path under a
    /// memory limit) and compares them with the bounds.
    Demo(DemoArgs),
    /// Runs a graph with graphsched, once or several times on one pool.
    Run(RunArgs),
    /// Simulates a run: the schedule on a virtual clock, with the estimates as durations.
    Simulate(SimulateArgs),
    /// Describes a graph: size, critical path, memory bounds.
    Info(InfoArgs),
    /// Plans a graph's memory statically: one arena, against the lower bounds and the pool.
    Plan(PlanArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum PlanModeArg {
    /// Lifetimes from one order; runs follow it on one thread
    Sequential,
    /// Values share bytes only when the graph orders them: safe for any parallel order
    ParallelSafe,
}

#[derive(Clone, Copy, ValueEnum)]
enum PlanOrderArg {
    /// The file's (topological) order
    Topo,
    /// A memory-aware topological order
    Memory,
}

#[derive(Args)]
struct PlanArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    #[arg(long, value_enum, default_value = "sequential")]
    mode: PlanModeArg,
    /// The order of a sequential plan
    #[arg(long, value_enum, default_value = "topo")]
    order: PlanOrderArg,
    /// Declare elementwise nodes in place on their first input (when sizes match)
    #[arg(long)]
    in_place: bool,
    /// Print one JSON object instead of the table
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct WorkloadArgs {
    /// A graph file (format of workloads/graphs/README.md), or `seed` for the seed pipeline
    #[arg(value_name = "FILE|seed")]
    graph: String,
    #[command(flatten)]
    seed: SeedArgs,
}

#[derive(Args)]
struct SeedArgs {
    /// Seed pipeline only: byte sizes times S [default: 0.3 for run, 1 for simulate and info]
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    scale: Option<f64>,
    /// Seed pipeline only: the generator's seed [default: 1]
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
}

#[derive(Args)]
struct DemoArgs {
    /// Byte sizes of the seed pipeline times S [default: 0.3]
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    scale: Option<f64>,
    /// Seed of the seed pipeline
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Threads of the parallel strategies, the caller's included
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=4096))]
    threads: u16,
    /// Write the Chrome trace (Perfetto, chrome://tracing) of the `critical` run to FILE
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Print one JSON object instead of the table
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PolicyArg {
    /// Readiness order, no priorities
    Fifo,
    /// Critical path first (least slack)
    #[value(alias = "critical-path")]
    Critical,
    /// Highest bottom level first (the longest path still ahead of the node)
    #[value(alias = "bottom-level")]
    Level,
}

impl PolicyArg {
    fn policy(self) -> Policy {
        match self {
            PolicyArg::Fifo => Policy::Fifo,
            PolicyArg::Critical => Policy::CriticalPath,
            PolicyArg::Level => Policy::BottomLevel,
        }
    }

    fn name(self) -> &'static str {
        match self {
            PolicyArg::Fifo => "fifo",
            PolicyArg::Critical => "critical",
            PolicyArg::Level => "level",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            PolicyArg::Fifo => "FIFO",
            PolicyArg::Critical => "critical path first",
            PolicyArg::Level => "highest bottom level first",
        }
    }
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Threads of the executor, the caller's included
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=4096))]
    threads: u16,
    /// No executor: the calling thread alone, in topological order (--threads and --policy do not
    /// apply)
    #[arg(long, conflicts_with_all = ["threads", "policy"])]
    sequential: bool,
    /// Most bytes the run's values may hold at once (0: no limit)
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    memory_limit: u64,
    /// Which ready node runs first
    #[arg(long, value_enum, default_value_t = PolicyArg::Level)]
    policy: PolicyArg,
    /// Runs on one pool: the first shows a cold pool, runs 2..K the steady state
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Write the Chrome trace (Perfetto, chrome://tracing) of the last run to FILE
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Print one JSON object instead of the table
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SimulateArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Simulated threads
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=4096))]
    threads: u16,
    /// Which ready node runs first
    #[arg(long, value_enum, default_value_t = PolicyArg::Level)]
    policy: PolicyArg,
    /// Most bytes values may hold at once (0: no limit)
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    memory_limit: u64,
    /// Print one JSON object instead of the table
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct InfoArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Write the graph as Graphviz DOT to FILE (critical path in red)
    #[arg(long, value_name = "FILE")]
    dot: Option<PathBuf>,
    /// Print one JSON object instead of the table
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo(args),
        Command::Run(args) => run_command(args),
        Command::Simulate(args) => simulate_command(args),
        Command::Info(args) => info_command(args),
        Command::Plan(args) => plan_command(args),
    };
    match result {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (`gsched info x | head`) is not an error worth a message.
            let _ = stdout.write_all(out.as_bytes()).and_then(|_| stdout.flush());
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("gsched: {message}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Workloads

/// A graph file or the seed pipeline, with what describes it.
struct Workload {
    file: GraphFile,
    /// What messages call it: the file's path, or "the seed pipeline".
    label: String,
    /// Seed pipeline only.
    scale: Option<f64>,
    seed: Option<u64>,
}

impl Workload {
    fn load(args: &WorkloadArgs, default_scale: f64) -> Result<Workload, String> {
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

    fn seed(scale: f64, seed: u64) -> Result<Workload, String> {
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

    fn name(&self) -> &str {
        &self.file.name
    }

    fn output_bytes(&self) -> u64 {
        self.file
            .nodes
            .iter()
            .flat_map(|n| &n.outputs)
            .map(|o| o.bytes as u64)
            .sum()
    }

    fn json(&self) -> Value {
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
    fn figures(&self) -> String {
        format!(
            "{} nodes, {} MB of outputs, {} MB live at most in file order",
            self.file.nodes.len(),
            mb(self.output_bytes()),
            mb(self.file.max_live_bytes())
        )
    }

    /// Builds the graph with measuring kernels (spinning to the estimates); with `bind`, also
    /// makes and binds memory for its inputs.
    fn build(&self, bind: bool) -> Result<Built, String> {
        let ledger = Ledger::new(&self.file.value_counts());
        let loaded = self
            .file
            .build(&mut |site| ledger.kernel(site.inputs.to_vec(), Some(Duration::from_nanos(site.estimate_ns))))
            .map_err(|e| format!("{}: {e}", self.label))?;
        let wanted: u64 = loaded.inputs.iter().map(|&(_, bytes)| bytes as u64).sum();
        let memory = physical_memory();
        if bind && wanted > memory / 2 {
            return Err(format!(
                "{}: the graph inputs take {} MB, more than half of this machine's {} MB of memory",
                self.label,
                mb(wanted),
                mb(memory)
            ));
        }
        let inputs = InputBuffers::new(if bind { &loaded.inputs } else { &[] }, 1);
        for (v, bytes) in inputs.bytes() {
            ledger.record(v, checksum(bytes));
        }
        Ok(Built {
            ledger,
            graph: loaded.graph,
            inputs,
        })
    }
}

/// Bytes of physical memory (u64::MAX if unknown).
fn physical_memory() -> u64 {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    if pages <= 0 || page <= 0 {
        return u64::MAX;
    }
    (pages as u64).saturating_mul(page as u64)
}

/// A built graph with its measuring kernels' ledger and (for runs) bound inputs.
struct Built {
    ledger: Arc<Ledger>,
    graph: Arc<Graph>,
    /// The graph inputs' memory.
    inputs: InputBuffers,
}

/// What no run can beat.
#[derive(Serialize)]
struct Bounds {
    critical_path_ns: u64,
    work_ns: u64,
    /// The largest of: critical path, work / threads, and every node's ancestors' work / threads
    /// plus its longest path (and the mirror): see `graphsched::sched::MakespanBound`.
    makespan_lb_ns: u64,
    /// Which of those terms binds, in words.
    makespan_bound_term: String,
    /// Most bytes live at once running in file order: the sequential memory.
    max_live_lb_bytes: u64,
}

impl Bounds {
    fn new(workload: &Workload, graph: &Graph, threads: u64) -> Bounds {
        let bound = graph.priorities().makespan_bound(threads as usize);
        Bounds {
            critical_path_ns: bound.critical_path_ns,
            work_ns: bound.work_ns,
            makespan_lb_ns: bound.makespan_lb_ns,
            makespan_bound_term: bound_term(graph, bound.binding, threads),
            max_live_lb_bytes: workload.file.max_live_bytes(),
        }
    }

    fn lines(&self, threads: u64) -> String {
        format!(
            "bounds:   critical path {} ms, work {} ms, makespan >= {} ms at {threads} thread{} ({}); memory >= {} MB (max live in file order)\n",
            ms(self.critical_path_ns),
            ms(self.work_ns),
            ms(self.makespan_lb_ns),
            if threads == 1 { "" } else { "s" },
            self.makespan_bound_term,
            mb(self.max_live_lb_bytes)
        )
    }
}

/// Which term of the makespan bound binds, in words.
fn bound_term(graph: &Graph, term: BoundTerm, threads: u64) -> String {
    match term {
        BoundTerm::CriticalPath => "the critical path".to_string(),
        BoundTerm::Work => format!("work / {threads}"),
        BoundTerm::Before(v) => format!("'{}' waits for its ancestors' work / {threads}", graph.node_name(v)),
        BoundTerm::After(v) => format!("'{}' then its descendants' work / {threads}", graph.node_name(v)),
    }
}

// ---------------------------------------------------------------------------------------------
// Measured runs

/// One measured run.
#[derive(Serialize, Clone)]
struct Row {
    strategy: String,
    wall_ns: u64,
    peak_live_bytes: u64,
    peak_reserved_bytes: u64,
    os_allocs: u64,
    /// Acquires served from memory the pool already held, over all acquires of the run.
    reuse_rate: f64,
    /// Minor page faults of the whole process during the run.
    minor_faults: u64,
}

fn minor_faults() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_minflt.max(0) as u64
    }
}

/// Runs `built` once on `pool` and measures it; peaks are reset first, so they are this run's.
/// The row is labelled `strategy`.
fn measured_run(
    strategy: &str,
    built: &Built,
    pool: &Arc<Pool>,
    executor: Option<&Executor>,
    policy: Policy,
    memory_limit_bytes: u64,
    trace: bool,
    plan: Option<&Plan>,
) -> graphsched::Result<(Row, RunResult)> {
    pool.reset_peaks();
    let before = pool.stats();
    let faults = minor_faults();
    let bindings = built.inputs.bindings();
    let result = run(
        &built.graph,
        pool,
        &RunOptions {
            inputs: &bindings,
            executor,
            policy,
            memory_limit_bytes,
            freeze_estimates: true,
            trace,
            plan,
            ..Default::default()
        },
    )?;
    let faults = minor_faults().saturating_sub(faults);
    let after = pool.stats();
    let stats = result.stats();
    let acquires = after.acquires - before.acquires;
    let hits = after.cache_hits - before.cache_hits;
    let row = Row {
        strategy: strategy.to_string(),
        wall_ns: stats.wall_ns,
        peak_live_bytes: stats.peak_live_bytes,
        peak_reserved_bytes: after.peak_reserved_bytes,
        os_allocs: after.os_allocs - before.os_allocs,
        reuse_rate: if acquires == 0 {
            0.0
        } else {
            hits as f64 / acquires as f64
        },
        minor_faults: faults,
    };
    Ok((row, result))
}

fn write_trace(path: &Path, result: &RunResult) -> Result<(), String> {
    let trace = result
        .chrome_trace()
        .ok_or_else(|| "the run recorded no trace".to_string())?;
    std::fs::write(path, trace).map_err(|e| format!("cannot write the trace to {}: {e}", path.display()))
}

/// A live line on stderr (`demo: running fifo (3/5)...`), when stderr is a terminal and the
/// output is not JSON; cleared when dropped.
struct Progress {
    on: bool,
}

impl Progress {
    fn new(json: bool) -> Progress {
        Progress {
            on: !json && std::io::stderr().is_terminal(),
        }
    }

    fn show(&self, line: &str) {
        if self.on {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{line}\x1b[K");
            let _ = err.flush();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.on {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// demo

fn demo(args: DemoArgs) -> Result<String, String> {
    let threads = args.threads as usize;
    let workload = Workload::seed(args.scale.unwrap_or(DEMO_SCALE), args.seed)?;
    let (naive_bytes, memory) = (workload.output_bytes(), physical_memory());
    if naive_bytes > memory / 2 {
        return Err(format!(
            "at scale {} the naive strategy would hold {} MB at once, more than half of this machine's {} MB of memory; use a smaller --scale",
            workload.scale.unwrap_or(1.0),
            mb(naive_bytes),
            mb(memory)
        ));
    }
    let progress = Progress::new(args.json);
    progress.show("demo: building the seed pipeline...");
    let built = workload.build(true)?;
    let bounds = Bounds::new(&workload, &built.graph, threads as u64);
    let executor = Executor::new(threads).map_err(|e| format!("cannot start the executor: {e}"))?;
    let strategies = ["naive", "pool", "fifo", "critical", "critical_limited", "planned"];
    let mut rows: Vec<Row> = Vec::new();
    for (i, &strategy) in strategies.iter().enumerate() {
        progress.show(&format!("demo: running {strategy} ({}/{})...", i + 1, strategies.len()));
        let row = match strategy {
            "naive" => {
                let faults = minor_faults();
                let stats = run_naive(&workload.file, &built.graph, &built.inputs, &built.ledger)
                    .map_err(|e| format!("the naive run failed: {e}"))?;
                Row {
                    strategy: strategy.to_string(),
                    wall_ns: stats.wall_ns,
                    peak_live_bytes: stats.peak_live_bytes,
                    peak_reserved_bytes: stats.peak_reserved_bytes,
                    os_allocs: stats.os_allocs,
                    reuse_rate: 0.0,
                    minor_faults: minor_faults().saturating_sub(faults),
                }
            }
            _ => {
                let (executor, policy, limit) = match strategy {
                    "pool" => (None, Policy::default(), 0),
                    "fifo" => (Some(&executor), Policy::Fifo, 0),
                    "critical" | "planned" => (Some(&executor), Policy::CriticalPath, 0),
                    _ => (Some(&executor), Policy::CriticalPath, bounds.max_live_lb_bytes),
                };
                let traced = strategy == "critical" && args.trace.is_some();
                // planned: critical path on a parallel-safe static plan (one arena per run).
                let plan = (strategy == "planned")
                    .then(|| Plan::new(&built.graph, Mode::ParallelSafe))
                    .transpose()
                    .map_err(|e| format!("cannot plan the graph: {e}"))?;
                // A fresh pool per strategy: each row shows a cold first run.
                let pool = Arc::new(Pool::default());
                let (row, result) =
                    measured_run(strategy, &built, &pool, executor, policy, limit, traced, plan.as_ref())
                        .map_err(|e| format!("the {strategy} run failed: {e}"))?;
                if let (true, Some(path)) = (traced, &args.trace) {
                    write_trace(path, &result)?;
                }
                row
            }
        };
        rows.push(row);
    }
    drop(progress);

    if args.json {
        return to_json(&json!({
            "workload": workload.json(),
            "threads": threads,
            "bounds": bounds,
            "rows": rows,
        }));
    }
    let mut out = format!(
        "gsched demo: the seed pipeline (seed {}, scale {}), {threads} thread{} for fifo and critical\n",
        args.seed,
        workload.scale.unwrap_or(1.0),
        if threads == 1 { "" } else { "s" }
    );
    out += &format!("workload: {}\n", workload.figures());
    out += &bounds.lines(threads as u64);
    out += "\n";
    let mut table = row_table("strategy");
    for row in &rows {
        table.push(row_cells(&row.strategy, row, &bounds));
    }
    out += &table.render();
    out += "\n";
    out += &wrap(
        &format!(
            "Each strategy's first run, on a fresh pool (cold: its system allocations and page faults \
             are counted). naive: file order, one thread, a malloc per value, all freed at the end \
             (reserved and OS allocs: what glibc's malloc took from the system). pool: graphsched, \
             file order on the calling thread, buffers reused as soon as their last reader is done. \
             fifo, critical: {threads} thread{}, ready nodes in FIFO or critical-path order. \
             critical_limited: critical path under a memory limit of the file-order max live, {} MB. \
             planned: critical path with every static value at a parallel-safe plan's offset, in one \
             arena. / bound: wall over the {threads}-thread makespan bound; / max live: reserved over the \
             max-live bound.{}",
            if threads == 1 { "" } else { "s" },
            mb(bounds.max_live_lb_bytes),
            match &args.trace {
                Some(path) => format!(" Trace of the critical run: {}.", path.display()),
                None => String::new(),
            }
        ),
        100,
    );
    Ok(out)
}

fn row_table(first: &str) -> Table {
    Table::new(&[
        first,
        "wall ms",
        "/ bound",
        "peak live MB",
        "reserved MB",
        "/ max live",
        "OS allocs",
        "reuse",
        "minor faults",
    ])
}

fn row_cells(label: &str, row: &Row, bounds: &Bounds) -> Vec<String> {
    vec![
        label.to_string(),
        ms(row.wall_ns),
        ratio(row.wall_ns, bounds.makespan_lb_ns),
        mb(row.peak_live_bytes),
        mb(row.peak_reserved_bytes),
        ratio(row.peak_reserved_bytes, bounds.max_live_lb_bytes),
        row.os_allocs.to_string(),
        format!("{:.1}%", row.reuse_rate * 100.0),
        row.minor_faults.to_string(),
    ]
}

// ---------------------------------------------------------------------------------------------
// run

fn run_command(args: RunArgs) -> Result<String, String> {
    let workload = Workload::load(&args.workload, DEMO_SCALE)?;
    let progress = Progress::new(args.json);
    progress.show("run: building the graph...");
    let built = workload.build(true)?;
    let threads = if args.sequential { 1 } else { args.threads as usize };
    let executor = match args.sequential {
        true => None,
        false => Some(Executor::new(threads).map_err(|e| format!("cannot start the executor: {e}"))?),
    };
    let (strategy, policy_name) = match args.sequential {
        true => ("sequential", "topological"),
        false => (args.policy.name(), args.policy.name()),
    };
    let bounds = Bounds::new(&workload, &built.graph, threads as u64);
    let pool = Arc::new(Pool::default());
    let runs = args.runs as usize;
    let mut first = None;
    let mut last = None;
    let mut walls = Vec::new();
    for i in 0..runs {
        progress.show(&format!("run: run {}/{runs}...", i + 1));
        let traced = args.trace.is_some() && i + 1 == runs;
        let (row, result) = measured_run(
            strategy,
            &built,
            &pool,
            executor.as_ref(),
            args.policy.policy(),
            args.memory_limit,
            traced,
            None,
        )
        .map_err(|e| match runs {
            1 => format!("the run failed: {e}"),
            _ => format!("run {} of {runs} failed: {e}", i + 1),
        })?;
        if let (true, Some(path)) = (traced, &args.trace) {
            write_trace(path, &result)?;
        }
        drop(result); // outputs back to the pool before the next run
        if i == 0 {
            first = Some(row);
        } else {
            walls.push(row.wall_ns);
            last = Some(row);
        }
    }
    drop(progress);
    let first = first.expect("at least one run");
    let steady = last.map(|last| Row {
        wall_ns: median(walls),
        ..last
    });

    if args.json {
        let mut out = json!({
            "workload": workload.json(),
            "threads": threads,
            "policy": policy_name,
            "memory_limit_bytes": args.memory_limit,
            "runs": runs,
            "bounds": bounds,
            "first": first,
        });
        if let Some(steady) = &steady {
            out["steady"] = json!(steady);
        }
        return to_json(&out);
    }
    let mut out = format!(
        "gsched run: {}, {}{}, {runs} run{} on one pool\n",
        workload.name(),
        if args.sequential {
            "calling thread alone, file order".to_string()
        } else {
            format!(
                "{threads} thread{}, {}",
                if threads == 1 { "" } else { "s" },
                args.policy.describe()
            )
        },
        match args.memory_limit {
            0 => String::new(),
            limit => format!(", memory limit {} MB", mb(limit)),
        },
        if runs == 1 { "" } else { "s" }
    );
    out += &format!("workload: {}\n", workload.figures());
    out += &bounds.lines(threads as u64);
    out += "\n";
    let mut table = row_table("run");
    table.push(row_cells("first", &first, &bounds));
    if let Some(steady) = &steady {
        table.push(row_cells("steady", steady, &bounds));
    }
    out += &table.render();
    out += "\n";
    out += &wrap(
        &format!(
            "first: the first run, on a fresh pool (cold: its system allocations and page faults are \
             counted).{} / bound: wall over the makespan bound; / max live: reserved over the \
             max-live bound.{}",
            if steady.is_some() {
                format!(
                    " steady: median wall time of runs 2..{runs}; memory, allocations, reuse and faults \
                     of the last run."
                )
            } else {
                String::new()
            },
            match &args.trace {
                Some(path) => format!(" Trace of the last run: {}.", path.display()),
                None => String::new(),
            }
        ),
        100,
    );
    Ok(out)
}

fn median(mut xs: Vec<u64>) -> u64 {
    xs.sort_unstable();
    match xs.len() {
        0 => 0,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2,
    }
}

// ---------------------------------------------------------------------------------------------
// simulate

fn simulate_command(args: SimulateArgs) -> Result<String, String> {
    let workload = Workload::load(&args.workload, FULL_SCALE)?;
    let built = workload.build(false)?;
    let threads = args.threads as usize;
    let sim = simulate(
        &built.graph,
        &SimOptions {
            threads,
            policy: args.policy.policy(),
            memory_limit_bytes: args.memory_limit,
            ..Default::default()
        },
    )
    .map_err(|e| format!("the simulation failed: {e}"))?;
    let built_graph = built.graph.clone();
    let bound = built_graph.priorities().makespan_bound(threads);
    let max_live = workload.file.max_live_bytes();
    if args.json {
        return to_json(&json!({
            "workload": workload.json(),
            "threads": threads,
            "policy": args.policy.name(),
            "memory_limit_bytes": args.memory_limit,
            "makespan_ns": sim.makespan_ns,
            "makespan_lb_ns": sim.makespan_lb_ns,
            "makespan_bound_term": bound_term(&built_graph, bound.binding, threads as u64),
            "critical_path_ns": sim.critical_path_ns,
            "work_ns": sim.work_ns,
            "peak_live_bytes": sim.peak_live_bytes,
            "max_live_lb_bytes": max_live,
            "nodes_run": sim.nodes_run,
            "utilization": sim.utilization,
        }));
    }
    let mut out = format!(
        "gsched simulate: {}, {threads} thread{}, {}{}\n",
        workload.name(),
        if threads == 1 { "" } else { "s" },
        args.policy.describe(),
        match args.memory_limit {
            0 => String::new(),
            limit => format!(", memory limit {} MB", mb(limit)),
        }
    );
    out += &format!("workload: {}\n\n", workload.figures());
    let mut t = Table::new(&["", "", ""]);
    t.left_align(2);
    t.push(vec![
        "makespan".into(),
        format!("{} ms", ms(sim.makespan_ns)),
        format!("{} the bound", ratio(sim.makespan_ns, sim.makespan_lb_ns)),
    ]);
    t.push(vec![
        "bound".into(),
        format!("{} ms", ms(sim.makespan_lb_ns)),
        bound_term(&built_graph, bound.binding, threads as u64),
    ]);
    t.push(vec![
        "critical path".into(),
        format!("{} ms", ms(sim.critical_path_ns)),
        String::new(),
    ]);
    t.push(vec!["work".into(), format!("{} ms", ms(sim.work_ns)), String::new()]);
    t.push(vec![
        "peak live".into(),
        format!("{} MB", mb(sim.peak_live_bytes)),
        format!(
            "{} the max live in file order ({} MB)",
            ratio(sim.peak_live_bytes, max_live),
            mb(max_live)
        ),
    ]);
    t.push(vec![
        "utilization".into(),
        format!("{:.1}%", sim.utilization * 100.0),
        "work / (makespan x threads)".into(),
    ]);
    out += &t.render();
    out += "\nVirtual time: each node takes its estimated duration.\n";
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// info

fn info_command(args: InfoArgs) -> Result<String, String> {
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
            if info.num_inputs == 1 { "" } else { "s" }
        ),
    ]);
    t.push(vec![
        "values".into(),
        info.num_values.to_string(),
        format!(
            "{} graph output{}",
            info.num_outputs,
            if info.num_outputs == 1 { "" } else { "s" }
        ),
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

// ---------------------------------------------------------------------------------------------
// Formatting

fn to_json(value: &Value) -> Result<String, String> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| format!("cannot write JSON: {e}"))
}

fn ms(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1e6)
}

fn ratio(x: u64, bound: u64) -> String {
    match bound {
        0 => "-".to_string(),
        b => format!("{:.2}x", x as f64 / b as f64),
    }
}

/// Wraps `text` at spaces to lines of at most `width` characters; a lone `/` stays with the word
/// after it (`/ bound`).
fn wrap(text: &str, width: usize) -> String {
    let mut words: Vec<String> = Vec::new();
    let mut glue = false;
    for word in text.split_whitespace() {
        match words.last_mut() {
            Some(last) if glue => *last += &format!(" {word}"),
            _ => words.push(word.to_string()),
        }
        glue = word == "/";
    }
    let mut out = String::new();
    let mut line = String::new();
    for word in &words {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            out += &line;
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line += word.as_str();
    }
    if !line.is_empty() {
        out += &line;
        out.push('\n');
    }
    out
}

/// Aligned columns: the first left-aligned, the others right-aligned unless told.
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    left: Vec<bool>,
}

impl Table {
    fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            left: (0..header.len()).map(|i| i == 0).collect(),
        }
    }

    fn left_align(&mut self, column: usize) {
        self.left[column] = true;
    }

    fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, (cell, &w)) in cells.iter().zip(&widths).enumerate() {
                if i > 0 {
                    s += "  ";
                }
                if self.left[i] {
                    s += &format!("{cell:<w$}");
                } else {
                    s += &format!("{cell:>w$}");
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut out = String::new();
        if self.header.iter().any(|h| !h.is_empty()) {
            out += &line(&self.header);
        }
        for row in &self.rows {
            out += &line(row);
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// plan

fn plan_command(args: PlanArgs) -> Result<String, String> {
    let mut workload = Workload::load(&args.workload, FULL_SCALE)?;
    if args.in_place {
        workload.file = workload.file.clone().with_elementwise_in_place();
    }
    // Placement only depends on sizes and order: kernels that do nothing are enough, and the
    // dynamic pool's peak for the same graph comes from one such run in file order.
    let loaded = workload
        .file
        .build(&mut |_| Box::new(|_| Ok(())))
        .map_err(|e| format!("{}: {e}", workload.label))?;
    let graph = &loaded.graph;
    let mode = match (args.mode, args.order) {
        (PlanModeArg::ParallelSafe, _) => Mode::ParallelSafe,
        (PlanModeArg::Sequential, PlanOrderArg::Topo) => Mode::Sequential(Order::Topological),
        (PlanModeArg::Sequential, PlanOrderArg::Memory) => Mode::Sequential(Order::MemoryAware),
    };
    let plan = Plan::new(graph, mode).map_err(|e| format!("{}: {e}", workload.label))?;
    plan.verify()
        .map_err(|e| format!("{}: the plan does not verify: {e}", workload.label))?;
    let max_live = workload.file.max_live_bytes();
    let node_lb = graph.info().node_lower_bound_bytes;
    let inputs = InputBuffers::new(&loaded.inputs, 1);
    let bindings = inputs.bindings();
    let pool = Arc::new(Pool::default());
    run(
        graph,
        &pool,
        &RunOptions {
            inputs: &bindings,
            freeze_estimates: true,
            ..Default::default()
        },
    )
    .map_err(|e| format!("{}: the pool run failed: {e}", workload.label))?;
    let pool_peak = pool.stats().peak_reserved_bytes;
    let ratio = plan.arena_bytes() as f64 / max_live.max(1) as f64;
    let mode_name = match mode {
        Mode::ParallelSafe => "parallel-safe",
        Mode::Sequential(Order::Topological) => "sequential, file order",
        Mode::Sequential(Order::MemoryAware) => "sequential, memory-aware order",
    };
    let aliases = plan.aliases();
    if args.json {
        return to_json(&json!({
            "workload": workload.json(),
            "mode": mode_name,
            "in_place_outputs": aliases,
            "arena_bytes": plan.arena_bytes(),
            "max_live_lb_bytes": max_live,
            "order_max_live_bytes": plan.max_live_bytes(),
            "node_lb_bytes": node_lb,
            "ratio": ratio,
            "pool_peak_reserved_bytes": pool_peak,
        }));
    }
    let mut out = format!(
        "gsched plan: {} ({mode_name}{})\n",
        workload.name(),
        if args.in_place { ", elementwise in place" } else { "" }
    );
    out += &format!(
        "  arena                      {:>12} bytes  {:>7.3}x the max-live bound\n",
        plan.arena_bytes(),
        ratio
    );
    out += &format!("  max-live bound, file order {:>12} bytes\n", max_live);
    if plan.max_live_bytes() != max_live {
        out += &format!("  max-live bound, plan order {:>12} bytes\n", plan.max_live_bytes());
    }
    out += &format!("  single-node bound          {:>12} bytes\n", node_lb);
    out += &format!(
        "  dynamic pool, peak         {:>12} bytes  {:>7.3}x (file order, one thread)\n",
        pool_peak,
        pool_peak as f64 / max_live.max(1) as f64
    );
    if args.in_place {
        out += &format!("  outputs placed in place    {aliases:>12}\n");
    }
    Ok(out)
}
