//! `warren-plot`: draws a PNG chart from a small JSON description the bench scripts write.
//!
//! ```json
//! {"title": "...", "x_label": "...", "y_label": "...", "kind": "line",
//!  "series": [{"name": "Warren", "points": [[1000, 12.5], [100000, 14.0]]}]}
//! {"title": "...", "y_label": "...", "kind": "bars", "categories": ["s1", "s2"],
//!  "series": [{"name": "Warren", "values": [600000, 40000]}]}
//! ```
//!
//! Usage: `warren-plot <chart.json> <out.png>`. Text is drawn with DejaVu Sans (Debian's
//! `fonts-dejavu-core`, which the bench scripts install), or the file named by `PLOT_FONT`.

use plotters::prelude::*;
use serde_json::Value;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const COLOURS: [RGBColor; 4] = [
    RGBColor(0xd9, 0x5f, 0x02),
    RGBColor(0x1b, 0x9e, 0x77),
    RGBColor(0x75, 0x70, 0xb3),
    RGBColor(0x66, 0x66, 0x66),
];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, input, output] = args.as_slice() else {
        return Err("usage: warren-plot <chart.json> <out.png>".into());
    };
    let font = std::env::var("PLOT_FONT").unwrap_or_else(|_| FONT.to_owned());
    let bytes: &'static [u8] = Box::leak(std::fs::read(&font)?.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{font} is not a usable font"))?;
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(input)?)?;
    let root = BitMapBackend::new(output, (960, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    match text(&spec, "kind") {
        "bars" => bars(&root, &spec)?,
        _ => lines(&root, &spec)?,
    }
    root.present()?;
    Ok(())
}

fn series(spec: &Value) -> Vec<&Value> {
    spec.get("series")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// One line per series, both axes logarithmic.
fn lines(root: &DrawingArea<BitMapBackend, plotters::coord::Shift>, spec: &Value) -> Res<()> {
    let all: Vec<(String, Vec<(f64, f64)>)> = series(spec)
        .into_iter()
        .map(|s| {
            let points = s
                .get("points")
                .and_then(Value::as_array)
                .map(|ps| {
                    ps.iter()
                        .filter_map(|p| {
                            let xy = numbers(p);
                            Some((*xy.first()?, *xy.get(1)?))
                        })
                        .collect()
                })
                .unwrap_or_default();
            (text(s, "name").to_owned(), points)
        })
        .collect();
    let xs = all.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
    let (x_min, x_max) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let y_max = all
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(0.0, f64::max);
    let y_min = all
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(f64::MAX, f64::min);
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(text(spec, "title"), ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72);
    let x = (x_min..x_max * 1.2).log_scale();
    let y = (y_min.max(1e-3) / 1.5..y_max.max(1.0) * 1.5).log_scale();
    let mut chart = builder.build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(text(spec, "x_label"))
        .y_desc(text(spec, "y_label"))
        .x_label_formatter(&|x| human(*x))
        .y_label_formatter(&|y| human(*y))
        .label_style(("sans-serif", 14))
        .draw()?;
    for (i, (name, points)) in all.into_iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(3)))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3))
            });
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 4, colour.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

/// Grouped bars: one group per category, one bar per series.
fn bars(root: &DrawingArea<BitMapBackend, plotters::coord::Shift>, spec: &Value) -> Res<()> {
    let categories: Vec<String> = spec
        .get("categories")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|c| c.as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default();
    let all: Vec<(String, Vec<f64>)> = series(spec)
        .into_iter()
        .map(|s| {
            (
                text(s, "name").to_owned(),
                numbers(s.get("values").unwrap_or(&Value::Null)),
            )
        })
        .collect();
    let y_max = all
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0, f64::max)
        * 1.15;
    let n = categories.len().max(1);
    let k = all.len().max(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(text(spec, "title"), ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..n as f64, 0.0..y_max.max(1.0))?;
    let labels = categories.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = (x - 0.5).round();
            if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(text(spec, "y_label"))
        .y_label_formatter(&|y| human(*y))
        .label_style(("sans-serif", 14))
        .draw()?;
    for (j, (name, values)) in all.into_iter().enumerate() {
        let colour = COLOURS[j % COLOURS.len()];
        let width = 0.8 / k;
        chart
            .draw_series(values.into_iter().enumerate().map(|(i, v)| {
                let x0 = i as f64 + 0.1 + j as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.95, v)], colour.filled())
            }))?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

/// 1500 -> "1.5k", 2000000 -> "2M".
fn human(v: f64) -> String {
    let (n, unit) = if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = if n >= 100.0 || n == n.round() {
        format!("{n:.0}")
    } else {
        format!("{n:.1}")
    };
    format!("{}{unit}", s.trim_end_matches(".0"))
}
