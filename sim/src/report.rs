//! What a replay prints: the side-by-side table of policies, the same as
//! JSON for scripts, the fill curve, and the plots (SVG): GPU utilisation
//! over time and the distribution of waits, one line per policy.

use plotters::prelude::*;
use serde_json::json;

use crate::fill::FillPoint;
use crate::metrics::{Outcome, Summary};
use crate::time::{as_secs_f64, SECOND};

/// A length of seconds as `1d 02h 03m 04s` (whole seconds), or `12.3 s` under a minute.
pub fn duration(s: f64) -> String {
    if s < 60.0 {
        return format!("{s:.1} s");
    }
    let t = s.round() as u64;
    let (d, h, m, sec) = (t / 86_400, t % 86_400 / 3600, t % 3600 / 60, t % 60);
    if d > 0 {
        format!("{d}d {h:02}h {m:02}m {sec:02}s")
    } else if h > 0 {
        format!("{h}h {m:02}m {sec:02}s")
    } else {
        format!("{m}m {sec:02}s")
    }
}

fn percent(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// The side-by-side table, one row per policy.
pub fn table(rows: &[Summary]) -> String {
    let header = ["policy", "makespan", "mean wait", "bounded slowdown", "GPU utilisation", "locality", "unplaceable"];
    let mut cells: Vec<[String; 7]> = vec![header.map(String::from)];
    for s in rows {
        cells.push([
            s.policy.clone(),
            duration(s.makespan_s),
            duration(s.mean_wait_s),
            format!("{:.2}", s.mean_bounded_slowdown),
            percent(s.gpu_utilisation),
            s.locality.map_or("n/a".into(), percent),
            percent(s.unplaceable),
        ]);
    }
    let widths: Vec<usize> = (0..7).map(|c| cells.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (i, r) in cells.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| if c == 0 { format!("{v:<w$}", w = widths[c]) } else { format!("{v:>w$}", w = widths[c]) })
            .collect();
        out += line.join("  ").trim_end();
        out.push('\n');
        if i == 0 {
            out += &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  ");
            out.push('\n');
        }
    }
    out
}

/// The table as JSON: `{"trace", "jobs", "skipped", "dropped", "policies": [Summary…]}`.
pub fn json(trace: &str, jobs: usize, skipped: usize, dropped: usize, rows: &[Summary]) -> serde_json::Value {
    json!({ "trace": trace, "jobs": jobs, "skipped_lines": skipped, "dropped_jobs": dropped, "policies": rows })
}

/// The fill curve as a table: one column per policy.
pub fn fill_table(curves: &[(String, Vec<FillPoint>)]) -> String {
    let mut out = String::from("GPU asked for / capacity");
    for (label, _) in curves {
        out += &format!("  | {label} (unplaced)");
    }
    out.push('\n');
    let rows = curves.first().map_or(0, |c| c.1.len());
    for r in 0..rows {
        out += &format!("{:>24}", percent(curves[0].1[r].arrived));
        for (label, points) in curves {
            out += &format!("  | {:>w$}", percent(points[r].unplaced), w = label.len() + 11);
        }
        out.push('\n');
    }
    out
}

const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// GPU utilisation over time, one line per policy, averaged over at most
/// 400 intervals: an SVG document.
pub fn utilisation_svg(outcomes: &[Outcome], gpus: usize) -> Result<String, String> {
    let end = outcomes.iter().flat_map(|o| o.records.iter().map(|r| r.end)).max().unwrap_or(0).max(SECOND);
    let bins = 400usize;
    let width = end.div_ceil(bins as u64).max(1);
    let capacity = gpus.max(1) as f64 * 1000.0;
    let mut lines = Vec::new();
    for o in outcomes {
        let timeline = o.gpu_timeline();
        let mut sums = vec![0f64; bins];
        for w in timeline.windows(2) {
            let (t0, level, t1) = (w[0].0, w[0].1, w[1].0);
            let mut t = t0;
            while t < t1 {
                let b = ((t / width) as usize).min(bins - 1);
                let bin_end = ((b as u64 + 1) * width).min(t1).max(t + 1);
                sums[b] += level as f64 * (bin_end - t) as f64;
                t = bin_end;
            }
        }
        let points: Vec<(f64, f64)> = sums
            .iter()
            .enumerate()
            .map(|(b, s)| (as_secs_f64(b as u64 * width) / 3600.0, 100.0 * s / (capacity * width as f64)))
            .collect();
        lines.push((o.label.clone(), points));
    }
    let x_max = as_secs_f64(end) / 3600.0;
    plot(
        &lines,
        "GPU utilisation over time",
        "hours since the first arrival",
        "% of GPUs held",
        (0.0, x_max),
        (0.0, 100.0),
        false,
    )
}

/// The distribution of waits (the share of jobs that waited at most x
/// seconds, x on a log scale), one line per policy: an SVG document.
pub fn waits_svg(outcomes: &[Outcome]) -> Result<String, String> {
    let mut lines = Vec::new();
    let mut x_max = 10.0f64;
    for o in outcomes {
        let mut waits: Vec<f64> =
            o.records.iter().filter(|r| r.placed).map(|r| as_secs_f64(r.start - r.submit) + 1.0).collect();
        waits.sort_by(f64::total_cmp);
        let n = waits.len().max(1) as f64;
        let step = (waits.len() / 500).max(1);
        let mut points: Vec<(f64, f64)> =
            waits.iter().enumerate().step_by(step).map(|(i, &w)| (w, (i + 1) as f64 / n)).collect();
        if let Some(&w) = waits.last() {
            points.push((w, 1.0));
            x_max = x_max.max(w);
        }
        lines.push((o.label.clone(), points));
    }
    plot(&lines, "Waits per policy", "wait + 1 (seconds, log scale)", "share of jobs", (1.0, x_max), (0.0, 1.0), true)
}

type Lines = [(String, Vec<(f64, f64)>)];

fn plot(
    lines: &Lines,
    title: &str,
    x: &str,
    y: &str,
    xr: (f64, f64),
    yr: (f64, f64),
    log_x: bool,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 540)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let xr = (xr.0, if xr.1 > xr.0 { xr.1 } else { xr.0 + 1.0 });
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart.configure_mesh().x_desc(x).y_desc(y).draw().map_err(|e| e.to_string())?;
                for (i, (label, points)) in lines.iter().enumerate() {
                    let colour = COLOURS[i % COLOURS.len()];
                    chart
                        .draw_series(LineSeries::new(points.iter().copied(), colour.stroke_width(2)))
                        .map_err(|e| e.to_string())?
                        .label(label.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()
                    .map_err(|e| e.to_string())?;
            }};
        }
        let mut builder = ChartBuilder::on(&root);
        builder.caption(title, ("sans-serif", 22)).margin(12).x_label_area_size(44).y_label_area_size(60);
        if log_x {
            draw!(builder.build_cartesian_2d((xr.0..xr.1).log_scale(), yr.0..yr.1).map_err(|e| e.to_string())?);
        } else {
            draw!(builder.build_cartesian_2d(xr.0..xr.1, yr.0..yr.1).map_err(|e| e.to_string())?);
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Record;

    #[test]
    fn table_and_plots() {
        let o = Outcome {
            label: "local-first".into(),
            records: vec![Record {
                job: 0,
                submit: 0,
                start: 5_000,
                end: 65_000,
                run: 60_000,
                gpu_milli: 2000,
                local: Some(true),
                placed: true,
            }],
            events: 2,
        };
        let s = o.summary(2);
        let t = table(std::slice::from_ref(&s));
        assert!(t.starts_with("policy"), "{t}");
        let row = t.lines().nth(2).unwrap();
        let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(cells, ["local-first", "1m 05s", "5.0 s", "1.08", "92.3 %", "100.0 %", "0.0 %"], "{t}");
        assert_eq!(json("x", 1, 0, 0, &[s])["policies"][0]["policy"], "local-first");
        let u = utilisation_svg(std::slice::from_ref(&o), 2).unwrap();
        assert!(u.starts_with("<svg") && u.contains("local-first"), "{}", &u[..100.min(u.len())]);
        assert!(waits_svg(&[o]).unwrap().contains("<svg"));
        assert_eq!(duration(90_061.0), "1d 01h 01m 01s");
    }
}
