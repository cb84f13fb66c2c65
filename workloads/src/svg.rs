//! Pictures for `gsched tune --svg` and `gsched demo --svg`, drawn with plotters' SVG backend.
//!
//! Marks, so that a test can count them: in the front, one filled circle per front point
//! ([`FRONT_COLOR`]), one square per confirmed real run ([`REAL_COLOR`]), one ring on the knee;
//! in the demo, one polyline per strategy's live-bytes curve and one rectangle per node of the
//! timeline.

use graphsched::NodeEvent;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::tune::Sweep;

/// Fill of the front's simulated points.
pub const FRONT_COLOR: RGBColor = RGBColor(31, 119, 180);
/// Fill of the confirmed points' real runs.
pub const REAL_COLOR: RGBColor = RGBColor(255, 127, 14);
/// Ring around the knee.
pub const KNEE_COLOR: RGBColor = RGBColor(214, 39, 40);
const BOUND_COLOR: RGBColor = RGBColor(120, 120, 120);
const CURVE_COLORS: [RGBColor; 4] = [
    RGBColor(127, 127, 127),
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
];

/// What no run can beat, drawn as lines on the front.
pub struct FrontBounds {
    /// Max live bytes in file order.
    pub max_live_bytes: u64,
    /// Longest path of estimates.
    pub critical_path_ns: u64,
    /// Work over the threads.
    pub work_per_thread_ns: u64,
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn err(e: impl std::fmt::Display) -> String {
    format!("cannot draw the picture: {e}")
}

/// The label of a point: `w2 1.10x` (window 2, limit 1.10 times the max-live bound) or
/// `w2 no limit`.
pub fn point_label(window: usize, limit: u64, max_live_bytes: u64) -> String {
    match limit {
        0 => format!("w{window} no limit"),
        l => format!("w{window} {:.2}x", l as f64 / max_live_bytes.max(1) as f64),
    }
}

/// The Pareto front of `sweep`: peak memory across, wall time up, zoomed on the points. The
/// bounds are dashed lines where they fall near the points, and named in the legend in any case.
pub fn front_svg(sweep: &Sweep, bounds: &FrontBounds, title: &str) -> Result<String, String> {
    let front: Vec<_> = sweep.front.iter().map(|&i| &sweep.points[i]).collect();
    let sim: Vec<(f64, f64)> = front
        .iter()
        .map(|p| (mb(p.sim_peak_bytes), ms(p.sim_makespan_ns)))
        .collect();
    let real: Vec<(f64, f64)> = front
        .iter()
        .filter_map(|p| Some((mb(p.real_peak_bytes?), ms(p.real_wall_ns?))))
        .collect();
    let xs = sim.iter().chain(&real).map(|p| p.0).chain([mb(bounds.max_live_bytes)]);
    let (x_lo, x_hi) = span(xs);
    let fastest = sim.iter().chain(&real).map(|p| p.1).fold(f64::INFINITY, f64::min);
    // Time bounds far below every point would squash the front into a line: leave them out.
    let time_bounds: Vec<(f64, &str)> = [
        (bounds.critical_path_ns, "critical path"),
        (bounds.work_per_thread_ns, "work / threads"),
    ]
    .into_iter()
    .map(|(ns, name)| (ms(ns), name))
    .filter(|&(y, _)| y >= 0.7 * fastest)
    .collect();
    let (y_lo, y_hi) = span(
        sim.iter()
            .chain(&real)
            .map(|p| p.1)
            .chain(time_bounds.iter().map(|b| b.0)),
    );
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (900, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(70)
            .build_cartesian_2d(x_lo..x_hi, y_lo..y_hi)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("peak live memory (MB)")
            .y_desc("wall time (ms)")
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        let bound_style = ShapeStyle::from(&BOUND_COLOR).stroke_width(1);
        let label = |s: &str, at: (f64, f64), pos: Pos| {
            Text::new(
                s.to_string(),
                at,
                ("sans-serif", 12).into_font().color(&BOUND_COLOR).pos(pos),
            )
        };
        let x_live = mb(bounds.max_live_bytes);
        chart
            .draw_series(DashedLineSeries::new(
                [(x_live, y_lo), (x_live, y_hi)],
                6,
                4,
                bound_style,
            ))
            .map_err(err)?;
        chart
            .draw_series([label("max-live bound", (x_live, y_hi), Pos::new(HPos::Left, VPos::Top))])
            .map_err(err)?;
        for &(y, name) in &time_bounds {
            chart
                .draw_series(DashedLineSeries::new([(x_lo, y), (x_hi, y)], 6, 4, bound_style))
                .map_err(err)?;
            chart
                .draw_series([label(name, (x_hi, y), Pos::new(HPos::Right, VPos::Bottom))])
                .map_err(err)?;
        }
        chart
            .draw_series(LineSeries::new(sim.clone(), FRONT_COLOR.mix(0.5)))
            .map_err(err)?;
        // Labels take turns around their points, so that neighbours do not print over each other.
        let offsets = [(8, -16), (8, 6), (-74, -16), (-74, 6)];
        chart
            .draw_series(front.iter().zip(&sim).enumerate().map(|(k, (p, &at))| {
                EmptyElement::at(at)
                    + Circle::new((0, 0), 5, FRONT_COLOR.filled())
                    + Text::new(
                        point_label(p.window, p.memory_limit_bytes, bounds.max_live_bytes),
                        offsets[k % offsets.len()],
                        ("sans-serif", 11).into_font(),
                    )
            }))
            .map_err(err)?;
        // Each real run joined to the point it confirms.
        for (p, &at) in front.iter().zip(&sim) {
            if let (Some(wall), Some(peak)) = (p.real_wall_ns, p.real_peak_bytes) {
                let joint = [at, (mb(peak), ms(wall))];
                chart
                    .draw_series(LineSeries::new(joint, REAL_COLOR.mix(0.6)))
                    .map_err(err)?;
            }
        }
        chart
            .draw_series(
                real.iter()
                    .map(|&at| EmptyElement::at(at) + Rectangle::new([(-4, -4), (4, 4)], REAL_COLOR.filled())),
            )
            .map_err(err)?;
        let knee = &sweep.points[sweep.knee];
        let at = (mb(knee.sim_peak_bytes), ms(knee.sim_makespan_ns));
        chart
            .draw_series([EmptyElement::at(at)
                + Circle::new((0, 0), 11, ShapeStyle::from(&KNEE_COLOR).stroke_width(2))
                + Text::new("knee", (-14, 13), ("sans-serif", 12).into_font().color(&KNEE_COLOR))])
            .map_err(err)?;
        let legend = format!(
            "blue: the simulated Pareto front ({} of {} points), w = window, x = limit / max-live bound; orange: real runs. \
             Critical path {:.1} ms, work / threads {:.1} ms.",
            front.len(),
            sweep.points.len(),
            ms(bounds.critical_path_ns),
            ms(bounds.work_per_thread_ns)
        );
        root.draw(&Text::new(legend, (20, 584), ("sans-serif", 11).into_font()))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// An axis range around `values` with some room on both sides.
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let room = ((hi - lo) * 0.08).max(hi.abs() * 0.02).max(1e-3);
    ((lo - room).max(0.0), hi + room)
}

/// One strategy's live bytes over a run: (time from the run's start, bytes) after each node.
pub struct Curve {
    /// The strategy's name.
    pub name: String,
    /// Points in time order.
    pub points: Vec<(u64, u64)>,
}

/// The demo: live bytes over time for each curve, and below, the timeline of one run (a lane per
/// thread, each node coloured by its slack: red on the critical path, blue with the most).
pub fn demo_svg(
    curves: &[Curve],
    timeline: &[NodeEvent],
    slack: &[u64],
    critical_path_ns: u64,
) -> Result<String, String> {
    let t_max = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .chain(timeline.iter().map(|e| e.end_ns))
        .max()
        .unwrap_or(1);
    let y_max = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.1))
        .max()
        .unwrap_or(1);
    let lanes = timeline.iter().map(|e| e.thread + 1).max().unwrap_or(1);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1000, 760)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, bottom) = root.split_vertically(430);
        let mut live = ChartBuilder::on(&top)
            .caption("live bytes over time", ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..ms(t_max) * 1.02, 0f64..mb(y_max) * 1.1)
            .map_err(err)?;
        live.configure_mesh()
            .x_desc("time (ms)")
            .y_desc("live (MB)")
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        for (i, curve) in curves.iter().enumerate() {
            let color = CURVE_COLORS[i % CURVE_COLORS.len()];
            // A step line: the level holds until the next node ends.
            let mut steps = vec![(0.0, 0.0)];
            let mut level = 0.0;
            for &(t, bytes) in &curve.points {
                steps.push((ms(t), level));
                level = mb(bytes);
                steps.push((ms(t), level));
            }
            live.draw_series(LineSeries::new(steps, color.stroke_width(2)))
                .map_err(err)?
                .label(curve.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        }
        live.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(err)?;

        let mut lanes_chart = ChartBuilder::on(&bottom)
            .caption(
                "timeline of the critical run: one lane per thread, red = no slack, blue = most slack",
                ("sans-serif", 15),
            )
            .margin(14)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..ms(t_max) * 1.02, 0f64..lanes as f64)
            .map_err(err)?;
        lanes_chart
            .configure_mesh()
            .x_desc("time (ms)")
            .y_desc("thread (0: the caller)")
            .y_labels(lanes as usize + 1)
            .y_label_formatter(&|y| format!("{}", *y as u32))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        let most = slack
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(1)
            .min(critical_path_ns.max(1));
        lanes_chart
            .draw_series(timeline.iter().map(|e| {
                // The square root spreads the colours: most nodes sit near a critical chain.
                let s = (slack.get(e.node as usize).copied().unwrap_or(0).min(most) as f64 / most as f64).sqrt();
                let color = RGBColor(
                    (214.0 * (1.0 - s) + 31.0 * s) as u8,
                    (39.0 * (1.0 - s) + 119.0 * s) as u8,
                    (40.0 * (1.0 - s) + 180.0 * s) as u8,
                );
                let lane = e.thread as f64;
                Rectangle::new(
                    [
                        (ms(e.start_ns), lane + 0.1),
                        (ms(e.end_ns.max(e.start_ns + 1)), lane + 0.9),
                    ],
                    color.filled(),
                )
            }))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}
