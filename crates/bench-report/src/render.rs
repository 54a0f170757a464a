//! A report from one run's figures: the Markdown page, its two charts, and the figures
//! kept as JSON for the next report to compare with.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::chart::{horizontal_bars, Bar, Scale};
use crate::machine::Machine;
use crate::{Better, Figure};

/// The file a report keeps its figures in, and the next report reads as "the last report".
pub const KEPT_FILE: &str = "figures.json";
pub const VS_REFERENCE_SVG: &str = "vs-reference.svg";
pub const VS_LAST_SVG: &str = "vs-last-report.svg";
/// A change smaller than this (in %) is drawn grey: this machine's noise between runs.
const NOISE_PERCENT: f64 = 5.0;

/// One run of the benches, as kept beside its report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// When the report was written (UTC, RFC 3339).
    pub taken: String,
    /// The smoke profile: each bench once at a small size on the debug build.
    pub smoke: bool,
    pub machine: Machine,
    /// The benches asked for, in order, and those of them that failed.
    pub benches: Vec<String>,
    pub failed: Vec<String>,
    pub figures: Vec<Figure>,
    /// What the reader should know about this run (e.g. how it was made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What the report's directory gets: file name → contents.
pub fn render(run: &Run, last: Option<&Run>) -> anyhow::Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    let previous = |f: &Figure| {
        last.and_then(|l| {
            l.figures
                .iter()
                .find(|p| p.bench == f.bench && p.name == f.name && p.unit == f.unit)
        })
    };

    let against_reference: Vec<Bar> = run
        .figures
        .iter()
        .filter_map(|f| {
            let ratio = f.ratio()?;
            Some(Bar {
                label: format!(
                    "{}: {} (vs {})",
                    f.bench,
                    f.name,
                    f.reference.as_ref()?.name
                ),
                value: ratio,
                good: Some(better_than(f.better, ratio, 1.0)),
            })
        })
        .collect();
    let against_last: Vec<Bar> = run
        .figures
        .iter()
        .filter_map(|f| {
            let change = change_percent(previous(f)?.value, f.value)?;
            Some(Bar {
                label: format!("{}: {}", f.bench, f.name),
                value: change,
                good: (change.abs() >= NOISE_PERCENT).then(|| better_than(f.better, change, 0.0)),
            })
        })
        .collect();
    let reference_chart = horizontal_bars(
        "Each figure against its reference in the same run",
        "× the reference (log scale; 1× = as fast as the reference)",
        Scale::Log,
        1.0,
        &against_reference,
    )?;
    let last_chart = horizontal_bars(
        "Each figure against the last kept report",
        "% change (green: better, red: worse, grey: within 5 %)",
        Scale::Linear,
        0.0,
        &against_last,
    )?;

    let mut page = String::new();
    writeln!(page, "# virtplane bench report\n")?;
    if run.smoke {
        writeln!(
            page,
            "**Smoke profile**: each bench once at a small size on the debug build. These \
             figures prove the benches run; they are not measurements.\n"
        )?;
    }
    let m = &run.machine;
    writeln!(
        page,
        "Measured {} at revision `{}` on {} ({} cores, {} GiB, Linux {}, /dev/kvm {}); {}; {}; {}.\n",
        run.taken,
        m.revision,
        m.cpu,
        m.cores,
        m.memory_gib,
        m.kernel,
        if m.kvm_device { "present" } else { "absent" },
        m.qemu,
        m.etcd,
        m.rustc
    )?;
    writeln!(
        page,
        "Every figure is beside its reference from the same run (raw etcd, bare QEMU, curl + \
         qemu-img, …) and beside the last report kept in the repository{}. Ratios within one \
         run compare; absolute figures move with the machine's load.\n",
        match last {
            Some(l) => format!(" (taken {} at `{}`)", l.taken, l.machine.revision),
            None => " (none was kept: this is the first)".into(),
        }
    )?;
    if let Some(note) = &run.note {
        writeln!(page, "{note}\n")?;
    }
    if !run.failed.is_empty() {
        writeln!(
            page,
            "**Did not run through:** {}.\n",
            run.failed.join(", ")
        )?;
    }
    if let Some(svg) = &reference_chart {
        files.insert(VS_REFERENCE_SVG.to_string(), svg.clone());
        writeln!(
            page,
            "![Each figure against its reference]({VS_REFERENCE_SVG})\n"
        )?;
    }
    if let Some(svg) = &last_chart {
        files.insert(VS_LAST_SVG.to_string(), svg.clone());
        writeln!(
            page,
            "![Each figure against the last report]({VS_LAST_SVG})\n"
        )?;
    }

    for bench in &run.benches {
        writeln!(page, "## {bench}\n")?;
        let mine: Vec<&Figure> = run.figures.iter().filter(|f| &f.bench == bench).collect();
        if mine.is_empty() {
            let why = if run.failed.contains(bench) {
                "failed before it recorded a figure"
            } else {
                "recorded no figure"
            };
            writeln!(page, "This bench {why}.\n")?;
            continue;
        }
        writeln!(
            page,
            "| Figure | This run | Reference (same run) | × reference | Target | Last report | Change |"
        )?;
        writeln!(page, "|---|--:|---|--:|--:|--:|--:|")?;
        for f in mine {
            let reference = f.reference.as_ref().map_or(String::new(), |r| {
                format!("{} {}", r.name, number(r.value, &f.unit))
            });
            let ratio = f.ratio().map_or(String::new(), |r| format!("{r:.2}×"));
            let target = match (f.target, f.meets_target()) {
                (Some(t), Some(met)) => format!(
                    "{} {} {}",
                    if f.better == Better::Lower {
                        "≤"
                    } else {
                        "≥"
                    },
                    number(t, &f.unit),
                    if met { "met" } else { "**missed**" }
                ),
                _ => String::new(),
            };
            let (was, change) = match previous(f) {
                Some(p) => (
                    number(p.value, &f.unit),
                    change_percent(p.value, f.value)
                        .map_or(String::new(), |c| format!("{c:+.1} %")),
                ),
                None => (String::new(), String::new()),
            };
            writeln!(
                page,
                "| {} | {} | {reference} | {ratio} | {target} | {was} | {change} |",
                f.name,
                number(f.value, &f.unit)
            )?;
        }
        writeln!(page)?;
    }
    files.insert("README.md".to_string(), page);
    files.insert(
        KEPT_FILE.to_string(),
        serde_json::to_string_pretty(run)? + "\n",
    );
    Ok(files)
}

/// Whether `value` is on the good side of `pivot` for a figure that improves `better`.
fn better_than(better: Better, value: f64, pivot: f64) -> bool {
    match better {
        Better::Lower => value <= pivot,
        Better::Higher => value >= pivot,
    }
}

fn change_percent(was: f64, now: f64) -> Option<f64> {
    (was != 0.0 && was.is_finite() && now.is_finite()).then(|| (now / was - 1.0) * 100.0)
}

/// A value with its unit, with as many decimals as its size needs.
fn number(value: f64, unit: &str) -> String {
    let digits = match value.abs() {
        v if v >= 100.0 || v == v.trunc() => 0,
        v if v >= 10.0 => 1,
        v if v >= 1.0 => 2,
        _ => 3,
    };
    format!("{value:.digits$} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{higher, lower};

    fn run(figures: Vec<Figure>) -> Run {
        Run {
            taken: "2026-12-07T21:00:00Z".into(),
            smoke: false,
            machine: Machine {
                revision: "abc1234".into(),
                cores: 2,
                ..Machine::default()
            },
            benches: vec!["qemu_boot".into(), "api_vs_etcd".into(), "migration".into()],
            failed: vec!["migration".into()],
            figures,
            note: None,
        }
    }

    #[test]
    fn each_figure_stands_beside_its_reference_and_the_last_report() {
        let last = run(vec![lower("qemu_boot", "start p50", 300.0, "ms")]);
        let now = run(vec![
            lower("qemu_boot", "start p50", 330.0, "ms")
                .beside("bare QEMU", 275.0)
                .target(285.0),
            higher("api_vs_etcd", "creates", 4226.0, "creates/s").beside("raw etcd", 8154.0),
        ]);
        let files = render(&now, Some(&last)).unwrap();
        let page = &files["README.md"];
        assert!(
            page.contains("| start p50 | 330 ms | bare QEMU 275 ms | 1.20× | ≤ 285 ms **missed** | 300 ms | +10.0 % |"),
            "{page}"
        );
        assert!(
            page.contains(
                "| creates | 4226 creates/s | raw etcd 8154 creates/s | 0.52× |  |  |  |"
            ),
            "{page}"
        );
        assert!(
            page.contains("## migration\n\nThis bench failed before it recorded a figure."),
            "{page}"
        );
        assert!(
            page.contains("**Did not run through:** migration."),
            "{page}"
        );
        assert!(files[VS_REFERENCE_SVG].contains("creates (vs raw etcd)"));
        assert!(files[VS_LAST_SVG].contains("qemu_boot: start p50"));
        let kept: Run = serde_json::from_str(&files[KEPT_FILE]).unwrap();
        assert_eq!(kept, now);
    }

    #[test]
    fn a_first_report_says_so_and_a_smoke_one_says_it_is_no_measurement() {
        let mut smoke = run(vec![lower("qemu_boot", "start p50", 330.0, "ms")]);
        smoke.smoke = true;
        smoke.note = Some("Made by hand.".into());
        let files = render(&smoke, None).unwrap();
        let page = &files["README.md"];
        assert!(page.contains("none was kept: this is the first"), "{page}");
        assert!(page.contains("they are not measurements"), "{page}");
        assert!(page.contains("\n\nMade by hand.\n\n"), "{page}");
        assert!(!files.contains_key(VS_LAST_SVG));
        assert!(!files.contains_key(VS_REFERENCE_SVG));
    }
}
