//! graphsched's outputs against ONNX Runtime's, bit for bit, in every memory mode.

use crate::graph::{OnnxGraph, Parallelism};
use crate::manifest::Manifest;
use crate::ort_api::{Arena, Runtime, SessionConfig};
use crate::run::{Engine, Memory, WholeModel};
use serde::Serialize;
use std::path::Path;

/// One graphsched configuration's outputs compared with ONNX Runtime's.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// Threads in all.
    pub threads: usize,
    /// Where the values lived (and whether the graph was the clusters').
    pub memory: String,
    /// Every output byte equal, in two runs one after the other.
    pub bitwise_equal: bool,
    /// Largest difference of one element (float outputs), over the two runs.
    pub max_abs_diff: f64,
}

/// The memory modes a run on `threads` threads can use.
pub fn modes(threads: usize) -> Vec<Memory> {
    if threads == 1 {
        vec![Memory::Pool, Memory::SequentialPlan, Memory::ParallelPlan]
    } else {
        vec![Memory::Pool, Memory::ParallelPlan, Memory::ScheduledPlan]
    }
}

/// Runs the whole prepared model in one ONNX Runtime session (one thread), then graphsched in
/// every memory mode at each of `threads`, twice each, and compares the outputs.
pub fn check(manifest: &Manifest, library: &Path, threads: &[usize]) -> Result<(Vec<Check>, Parallelism), String> {
    let runtime = Runtime::load(library, None)?;
    let config = SessionConfig {
        intra_threads: 1,
        ..Default::default()
    };
    let session = runtime.session(&manifest.dir.join(&manifest.prepared), config)?;
    let reference = WholeModel::new(&runtime, session, manifest).run(true)?;
    let graph = OnnxGraph::build(
        &runtime,
        manifest,
        SessionConfig {
            arena: Arena::Shared,
            ..config
        },
    )?;
    let mut checks = Vec::new();
    for &t in threads {
        compare(&graph, manifest, t, "", &reference, &mut checks)?;
    }
    // The clusters graphsched chose (`--partition`), where they were written.
    for &t in threads {
        let dir = crate::partition::clusters_dir(&manifest.dir, t);
        if !dir.join("manifest.json").exists() {
            continue;
        }
        let clusters = Manifest::load(&dir)?;
        let cluster_graph = OnnxGraph::build(
            &runtime,
            &clusters,
            SessionConfig {
                arena: Arena::Shared,
                value_by_value: true,
                ..config
            },
        )?;
        compare(&cluster_graph, &clusters, t, "clusters, ", &reference, &mut checks)?;
    }
    Ok((checks, graph.simulate(threads)?))
}

/// Runs `graph` in every memory mode on `t` threads, twice each, against `reference`.
fn compare(
    graph: &OnnxGraph<'_>,
    manifest: &Manifest,
    t: usize,
    what: &str,
    reference: &[Vec<u8>],
    checks: &mut Vec<Check>,
) -> Result<(), String> {
    for memory in modes(t) {
        let mut engine = Engine::new(graph, manifest, t, memory)?;
        let mut check = Check {
            threads: t,
            memory: format!("{what}{}", memory.name()),
            bitwise_equal: true,
            max_abs_diff: 0.0,
        };
        for _ in 0..2 {
            let (_, outputs) = engine.run(graph, true)?;
            if outputs.len() != reference.len() {
                return Err(format!(
                    "graphsched gave {} outputs, ONNX Runtime {}",
                    outputs.len(),
                    reference.len()
                ));
            }
            for ((got, want), out) in outputs.iter().zip(reference).zip(&graph.outputs) {
                check.bitwise_equal &= got == want;
                if out.info.elem_type == 1 {
                    check.max_abs_diff = check.max_abs_diff.max(max_abs_diff(got, want));
                }
            }
        }
        checks.push(check);
    }
    Ok(())
}

/// Largest |a - b| over two float32 buffers (infinite where one is NaN and the other not).
pub fn max_abs_diff(a: &[u8], b: &[u8]) -> f64 {
    let floats = |x: &[u8]| {
        x.chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<_>>()
    };
    floats(a)
        .iter()
        .zip(floats(b))
        .map(|(x, y)| {
            if x.is_nan() != y.is_nan() {
                f64::INFINITY
            } else if x.is_nan() {
                0.0
            } else {
                (*x as f64 - y as f64).abs()
            }
        })
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_abs_diff_finds_the_largest_difference_and_nans() {
        let bytes = |xs: &[f32]| xs.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        assert_eq!(max_abs_diff(&bytes(&[1.0, 2.0]), &bytes(&[1.0, 2.0])), 0.0);
        assert_eq!(max_abs_diff(&bytes(&[1.0, 2.0, -3.0]), &bytes(&[1.5, 2.0, 1.0])), 4.0);
        assert_eq!(max_abs_diff(&bytes(&[f32::NAN]), &bytes(&[0.0])), f64::INFINITY);
    }

    #[test]
    fn plans_at_one_thread_include_the_sequential_one_and_executors_never_do() {
        assert!(modes(1).contains(&Memory::SequentialPlan));
        assert!(!modes(2).contains(&Memory::SequentialPlan));
        assert!(modes(2).contains(&Memory::ScheduledPlan));
    }
}
