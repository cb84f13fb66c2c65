//! `gsched tune` and the pictures: the sweep's structure on graphs of the corpus and the real
//! graphs, the command's promises (the recommendation on the front, every real run within its
//! limit), and SVG files that parse, with one mark per point.

use std::path::PathBuf;
use std::process::Command;

use graphsched_workloads::corpus::inference_graph;
use graphsched_workloads::svg::{point_label, FRONT_COLOR, KNEE_COLOR, REAL_COLOR};
use graphsched_workloads::tune::{limits, sweep, Point, KNEE_TOLERANCE};
use graphsched_workloads::{bundled_graphs, GraphFile, Measured, Pace};
use plotters::style::RGBColor;
use serde_json::Value;

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

fn check_sweep(name: &str, file: &GraphFile, threads: usize) {
    let measured = Measured::build(file, Pace::Touch, Some(1)).unwrap();
    let max_live = file.max_live_bytes();
    let s = sweep(&measured.graph, threads, max_live).unwrap();
    let tried = 2 * threads * limits(max_live).len();
    assert_eq!(
        s.points.len() + s.infeasible.len(),
        tried,
        "{name}: every setting tried once"
    );
    assert!(
        s.infeasible.is_empty(),
        "{name}: admission meets any limit at or above the max-live bound"
    );
    assert!(
        !s.front.is_empty() && s.front.contains(&s.knee),
        "{name}: the knee is on the front"
    );
    for &i in &s.front {
        let p = &s.points[i];
        assert!(
            !s.points.iter().any(|q| q.dominates(p)),
            "{name}: front point {i} is dominated"
        );
    }
    let same = |a: &Point, b: &Point| (a.sim_makespan_ns, a.sim_peak_bytes) == (b.sim_makespan_ns, b.sim_peak_bytes);
    for (i, p) in s.points.iter().enumerate() {
        let covered = s
            .front
            .iter()
            .any(|&f| s.points[f].dominates(p) || same(&s.points[f], p));
        assert!(covered, "{name}: point {i} is neither on the front nor beaten by it");
    }
    let fastest = s.front.iter().map(|&i| s.points[i].sim_makespan_ns).min().unwrap();
    let knee = &s.points[s.knee];
    assert!(
        knee.sim_makespan_ns as f64 <= fastest as f64 * (1.0 + KNEE_TOLERANCE),
        "{name}: the knee is fast enough"
    );
    for &i in &s.front {
        let p = &s.points[i];
        if p.sim_makespan_ns as f64 <= fastest as f64 * (1.0 + KNEE_TOLERANCE) {
            assert!(
                p.sim_peak_bytes >= knee.sim_peak_bytes,
                "{name}: a fast-enough point needs less than the knee"
            );
        }
    }
    for window in threads..=2 * threads {
        let at = |w: usize| s.points.iter().filter(move |p| p.window == w);
        let rows: Vec<(u64, u64, u64)> = at(window)
            .map(|p| (p.memory_limit_bytes, p.sim_makespan_ns, p.sim_peak_bytes))
            .collect();
        let base: Vec<(u64, u64, u64)> = at(threads)
            .map(|p| (p.memory_limit_bytes, p.sim_makespan_ns, p.sim_peak_bytes))
            .collect();
        assert_eq!(rows, base, "{name}: a window at or above the threads caps nothing");
    }
}

#[test]
fn sweeps_have_a_non_dominated_front_that_covers_every_point_and_a_knee_on_it() {
    for seed in 0..6 {
        check_sweep(&format!("corpus {seed}"), &inference_graph(seed), 2 + seed as usize % 3);
    }
    for path in bundled_graphs() {
        let file = GraphFile::load(&path).unwrap();
        check_sweep(&path.display().to_string(), &file, 4);
    }
}

fn gsched(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_gsched"))
        .args(args)
        .output()
        .expect("gsched starts");
    assert!(
        out.status.success(),
        "gsched {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("tune-{}-{name}", std::process::id()))
}

/// The elements named `tag` whose attribute `attr` is `value`.
fn count(doc: &roxmltree::Document<'_>, tag: &str, attr: &str, value: &str) -> usize {
    doc.descendants()
        .filter(|n| n.has_tag_name(tag) && n.attribute(attr) == Some(value))
        .count()
}

#[test]
fn tune_recommends_a_front_point_and_its_real_runs_keep_their_limits() {
    let svg_path = tmp("front.svg");
    let svg = svg_path.to_str().unwrap();
    let out = gsched(&[
        "tune",
        "seed",
        "--scale",
        "0.01",
        "--threads",
        "3",
        "--json",
        "--svg",
        svg,
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let points = v["points"].as_array().unwrap();
    let front: Vec<usize> = v["front"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap() as usize)
        .collect();
    let knee = v["knee"].as_u64().unwrap() as usize;
    assert!(front.contains(&knee));
    assert_eq!(v["recommended"]["window"], points[knee]["window"]);
    assert_eq!(
        v["recommended"]["memory_limit_bytes"],
        points[knee]["memory_limit_bytes"]
    );
    let get = |p: &Value, k: &str| p[k].as_u64().unwrap();
    for &i in &front {
        let p = &points[i];
        for q in points {
            let dominates = get(q, "sim_makespan_ns") <= get(p, "sim_makespan_ns")
                && get(q, "sim_peak_bytes") <= get(p, "sim_peak_bytes")
                && (get(q, "sim_makespan_ns") < get(p, "sim_makespan_ns")
                    || get(q, "sim_peak_bytes") < get(p, "sim_peak_bytes"));
            assert!(!dominates, "front point {i} is dominated");
        }
        let (limit, peak) = (get(p, "memory_limit_bytes"), get(p, "real_peak_bytes"));
        assert!(get(p, "real_wall_ns") > 0, "front point {i} was run for real");
        assert!(
            limit == 0 || peak <= limit,
            "front point {i}: real peak {peak} over its limit {limit}"
        );
    }
    for (i, p) in points.iter().enumerate() {
        assert_eq!(
            p.get("real_wall_ns").is_some(),
            front.contains(&i),
            "only front points run for real"
        );
    }

    let text = std::fs::read_to_string(&svg_path).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    assert!(doc.root_element().has_tag_name("svg"));
    assert_eq!(
        count(&doc, "circle", "fill", &hex(FRONT_COLOR)),
        front.len(),
        "one dot per front point"
    );
    assert_eq!(
        count(&doc, "rect", "fill", &hex(REAL_COLOR)),
        front.len(),
        "one square per real run"
    );
    assert_eq!(
        count(&doc, "circle", "stroke", &hex(KNEE_COLOR)),
        1,
        "one ring, on the knee"
    );
    let labels = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join("|");
    let max_live = v["bounds"]["max_live_lb_bytes"].as_u64().unwrap();
    for &i in &front {
        let label = point_label(
            get(&points[i], "window") as usize,
            get(&points[i], "memory_limit_bytes"),
            max_live,
        );
        assert!(
            labels.split('|').any(|l| l.trim() == label),
            "point {i} is labelled {label}: {labels}"
        );
    }
    assert!(labels.contains("max-live bound") && labels.contains("knee"));
    std::fs::remove_file(&svg_path).unwrap();
}

#[test]
fn demo_draws_three_curves_and_one_box_per_node_of_the_critical_run() {
    let svg_path = tmp("demo.svg");
    let svg = svg_path.to_str().unwrap();
    let out = gsched(&["demo", "--scale", "0.01", "--json", "--svg", svg]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let critical = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["strategy"] == "critical")
        .unwrap();
    let nodes = v["workload"]["nodes"].as_u64().unwrap() as usize;
    assert!(nodes > 0, "{critical}");
    let text = std::fs::read_to_string(&svg_path).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    // Each curve is a polyline, and its legend swatch another, in the curve's colour.
    for color in ["#7F7F7F", "#1F77B4", "#D62728"] {
        assert_eq!(
            count(&doc, "polyline", "stroke", color),
            2,
            "curve {color} and its legend"
        );
    }
    let boxes = doc
        .descendants()
        .filter(|n| {
            n.has_tag_name("rect") && n.attribute("stroke") == Some("none") && n.attribute("opacity") == Some("1")
        })
        .filter(|n| n.attribute("fill") != Some("#FFFFFF"))
        .count();
    assert_eq!(boxes, nodes, "one box per node of the critical run");
    std::fs::remove_file(&svg_path).unwrap();
}
