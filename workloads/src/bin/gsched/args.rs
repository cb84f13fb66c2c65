//! The command line: subcommands and their options.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use graphsched::Policy;

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
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
    /// Groups nodes into clusters to run as one call each, for an engine whose calls have a
    /// fixed cost: the simulator decides, and prints the makespan and peak before and after.
    Partition(PartitionArgs),
    /// Sweeps the window and the memory limit on the simulator, confirms the Pareto front with
    /// real runs and recommends the knee.
    Tune(TuneArgs),
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum PlanModeArg {
    /// Lifetimes from one order; runs follow it on one thread
    Sequential,
    /// Values share bytes only when the graph orders them: safe for any parallel order
    ParallelSafe,
    /// Lifetimes from the simulated schedule on --threads threads, plus the ordering
    /// constraints that make sharing safe for any order
    Scheduled,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum PlanOrderArg {
    /// The file's (topological) order
    Topo,
    /// A memory-aware topological order
    Memory,
}

#[derive(Args)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    #[arg(long, value_enum, default_value = "sequential")]
    pub(crate) mode: PlanModeArg,
    /// The order of a sequential plan
    #[arg(long, value_enum, default_value = "topo")]
    pub(crate) order: PlanOrderArg,
    /// Threads of the schedule a scheduled plan is made for
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) threads: u32,
    /// Declare elementwise nodes in place on their first input (when sizes match)
    #[arg(long)]
    pub(crate) in_place: bool,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct WorkloadArgs {
    /// A graph file (format of workloads/graphs/README.md), or `seed` for the seed pipeline
    #[arg(value_name = "FILE|seed")]
    pub(crate) graph: String,
    #[command(flatten)]
    pub(crate) seed: SeedArgs,
}

#[derive(Args)]
pub(crate) struct SeedArgs {
    /// Seed pipeline only: byte sizes times S [default: 0.3 for run, 1 for simulate and info]
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub(crate) scale: Option<f64>,
    /// Seed pipeline only: the generator's seed [default: 1]
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
}

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Byte sizes of the seed pipeline times S [default: 0.3]
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub(crate) scale: Option<f64>,
    /// Seed of the seed pipeline
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) seed: u64,
    /// Threads of the parallel strategies, the caller's included
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub(crate) threads: u16,
    /// Write the Chrome trace (Perfetto, chrome://tracing) of the `critical` run to FILE
    #[arg(long, value_name = "FILE")]
    pub(crate) trace: Option<PathBuf>,
    /// Draw live bytes over time (naive, pool, critical) and the critical run's timeline to FILE
    /// (SVG)
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PolicyArg {
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
    pub(crate) fn policy(self) -> Policy {
        match self {
            PolicyArg::Fifo => Policy::Fifo,
            PolicyArg::Critical => Policy::CriticalPath,
            PolicyArg::Level => Policy::BottomLevel,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            PolicyArg::Fifo => "fifo",
            PolicyArg::Critical => "critical",
            PolicyArg::Level => "level",
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            PolicyArg::Fifo => "FIFO",
            PolicyArg::Critical => "critical path first",
            PolicyArg::Level => "highest bottom level first",
        }
    }
}

#[derive(Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// Threads of the executor, the caller's included
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub(crate) threads: u16,
    /// No executor: the calling thread alone, in topological order (--threads and --policy do not
    /// apply)
    #[arg(long, conflicts_with_all = ["threads", "policy"])]
    pub(crate) sequential: bool,
    /// Most bytes the run's values may hold at once (0: no limit)
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub(crate) memory_limit: u64,
    /// Which ready node runs first
    #[arg(long, value_enum, default_value_t = PolicyArg::Level)]
    pub(crate) policy: PolicyArg,
    /// Runs on one pool: the first shows a cold pool, runs 2..K the steady state
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) runs: u32,
    /// Write the Chrome trace (Perfetto, chrome://tracing) of the last run to FILE
    #[arg(long, value_name = "FILE")]
    pub(crate) trace: Option<PathBuf>,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct TuneArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// Threads of the executor, simulated and real
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) threads: u16,
    /// Real runs of each point on the front (wall time: their median)
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) runs: u32,
    /// Draw the front to FILE (SVG): peak memory across, wall time up, the knee and the bounds
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct SimulateArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// Simulated threads
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub(crate) threads: u16,
    /// Which ready node runs first
    #[arg(long, value_enum, default_value_t = PolicyArg::Level)]
    pub(crate) policy: PolicyArg,
    /// Most bytes values may hold at once (0: no limit)
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub(crate) memory_limit: u64,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct InfoArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// Write the graph as Graphviz DOT to FILE (critical path in red)
    #[arg(long, value_name = "FILE")]
    pub(crate) dot: Option<PathBuf>,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct PartitionArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// The fixed cost of one call, in nanoseconds (each node's estimate includes one)
    #[arg(long, value_name = "C")]
    pub(crate) call_cost_ns: u64,
    /// Threads the clusters will run on
    #[arg(long, value_name = "P", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub(crate) threads: u16,
    /// Most bytes values may hold at once, clusters' internal values included (0: no limit)
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub(crate) memory_limit: u64,
    /// Which ready node runs first
    #[arg(long, value_enum, default_value_t = PolicyArg::Level)]
    pub(crate) policy: PolicyArg,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub(crate) json: bool,
}
