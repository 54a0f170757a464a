//! The report's charts: horizontal bars, one per figure, drawn from a baseline (1× the
//! reference, or 0 % change), as SVG.

use plotters::prelude::*;

/// One bar: its label and length; `good` colours it (green) or not (red), `None` grey.
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub good: Option<bool>,
}

/// How bar lengths map to the axis.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// For ratios: 0.5× and 2× are as far from 1×, and one 100× does not flatten the rest.
    Log,
}

/// An SVG of `bars` from `baseline`, `title` above and `axis` below; `None` without bars.
pub fn horizontal_bars(
    title: &str,
    axis: &str,
    scale: Scale,
    baseline: f64,
    bars: &[Bar],
) -> anyhow::Result<Option<String>> {
    if bars.is_empty() {
        return Ok(None);
    }
    // The axis counts from the bottom: reversed, the first bar is drawn at the top.
    let bars: Vec<&Bar> = bars.iter().rev().collect();
    let to_axis = |v: f64| match scale {
        Scale::Linear => v,
        Scale::Log => v.log10(),
    };
    let baseline = to_axis(baseline);
    let finite = |v: f64| {
        let v = to_axis(v);
        if v.is_finite() {
            v
        } else {
            baseline
        }
    };
    let low = bars
        .iter()
        .map(|b| finite(b.value))
        .fold(baseline, f64::min);
    let high = bars
        .iter()
        .map(|b| finite(b.value))
        .fold(baseline, f64::max);
    let pad = ((high - low) * 0.08).max(0.05);
    let label_width = bars
        .iter()
        .map(|b| b.label.chars().count())
        .max()
        .unwrap_or(10) as u32
        * 7
        + 10;
    // One row per bar and one empty row (the segmented axis ends on a segment of its own).
    let height = 100 + 28 * (bars.len() as u32 + 1);
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (label_width + 560, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let count = bars.len() as i32;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(36)
            .y_label_area_size(label_width)
            .build_cartesian_2d((low - pad)..(high + pad), (0..count).into_segmented())?;
        let labels: Vec<&str> = bars.iter().map(|b| b.label.as_str()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(bars.len())
            .y_label_formatter(&|v: &SegmentValue<i32>| match v {
                SegmentValue::CenterOf(i) => labels.get(*i as usize).unwrap_or(&"").to_string(),
                _ => String::new(),
            })
            .x_label_formatter(&|v: &f64| match scale {
                Scale::Linear => format!("{v:.1}"),
                Scale::Log => format!("{}×", significant(10f64.powf(*v))),
            })
            .x_desc(axis)
            .label_style(("sans-serif", 12))
            .draw()?;
        chart.draw_series(
            Histogram::horizontal(&chart)
                .baseline(baseline)
                .margin(3)
                .style_func(|index, _| {
                    let bar = &bars[*index_of(index) as usize];
                    match bar.good {
                        Some(true) => RGBColor(62, 134, 53).filled(),
                        Some(false) => RGBColor(201, 25, 11).filled(),
                        None => RGBColor(106, 110, 115).filled(),
                    }
                })
                .data(
                    bars.iter()
                        .enumerate()
                        .map(|(i, b)| (i as i32, finite(b.value))),
                ),
        )?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![
                (baseline, SegmentValue::Exact(0)),
                (baseline, SegmentValue::Last),
            ],
            BLACK.stroke_width(1),
        )))?;
        root.present()?;
    }
    Ok(Some(svg))
}

/// Two significant digits: 0.25, 1.3, 12, 120.
fn significant(v: f64) -> String {
    match v.abs() {
        a if a >= 10.0 => format!("{v:.0}"),
        a if a >= 1.0 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    }
}

fn index_of(value: &SegmentValue<i32>) -> &i32 {
    match value {
        SegmentValue::Exact(i) | SegmentValue::CenterOf(i) => i,
        SegmentValue::Last => &0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_one_bar_per_figure_with_its_label() {
        let bars = [
            Bar {
                label: "start p50".into(),
                value: 1.12,
                good: Some(false),
            },
            Bar {
                label: "LIST 10,000 VMs".into(),
                value: 0.3,
                good: Some(true),
            },
        ];
        let svg = horizontal_bars(
            "against the reference",
            "× reference",
            Scale::Log,
            1.0,
            &bars,
        )
        .unwrap()
        .unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(
            svg.contains("start p50") && svg.contains("LIST 10,000 VMs"),
            "{svg}"
        );
        assert!(svg.contains("against the reference"), "{svg}");
    }

    #[test]
    fn no_bars_no_chart() {
        assert!(horizontal_bars("t", "x", Scale::Linear, 0.0, &[])
            .unwrap()
            .is_none());
    }
}
