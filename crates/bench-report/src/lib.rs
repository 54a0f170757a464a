//! The figures the benches measure, in one shape, for the report `scripts/bench` writes.
//!
//! A bench prints its figures as it always did and also records the ones that matter:
//! `bench_report::lower("qemu_boot", "POST → first serial line p50", 309.0, "ms")
//! .beside("bare QEMU", 274.0).record()`. When `BENCH_REPORT_DIR` is set (as
//! `scripts/bench` sets it), each record is one JSON line appended to
//! `$BENCH_REPORT_DIR/figures.jsonl`; the `bench-report` binary turns that file into the
//! Markdown report and its charts.

use std::io::Write;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub mod chart;
pub mod machine;
pub mod render;

/// Where figures are appended, when a report is being gathered.
pub const DIR_VARIABLE: &str = "BENCH_REPORT_DIR";
/// The file of recorded figures inside the report's directory, one JSON object a line.
pub const FIGURES_FILE: &str = "figures.jsonl";

/// Which way a figure improves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Times, bytes, CPU.
    Lower,
    /// Rates.
    Higher,
}

/// What a figure is measured beside in the same run (raw etcd, bare QEMU, curl + qemu-img).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    pub name: String,
    pub value: f64,
}

/// One measured figure of one bench.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub bench: String,
    pub name: String,
    pub value: f64,
    pub unit: String,
    pub better: Better,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Reference>,
    /// What the figure should reach, in the figure's unit (the targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<f64>,
}

/// A figure where less is better.
pub fn lower(bench: &str, name: &str, value: f64, unit: &str) -> Figure {
    Figure::new(bench, name, value, unit, Better::Lower)
}

/// A figure where more is better.
pub fn higher(bench: &str, name: &str, value: f64, unit: &str) -> Figure {
    Figure::new(bench, name, value, unit, Better::Higher)
}

impl Figure {
    fn new(bench: &str, name: &str, value: f64, unit: &str, better: Better) -> Figure {
        Figure {
            bench: bench.into(),
            name: name.into(),
            value,
            unit: unit.into(),
            better,
            reference: None,
            target: None,
        }
    }

    /// Measured beside `name`'s `value` (same unit) in the same run.
    pub fn beside(mut self, name: &str, value: f64) -> Figure {
        self.reference = Some(Reference {
            name: name.into(),
            value,
        });
        self
    }

    /// What the figure should reach.
    pub fn target(mut self, value: f64) -> Figure {
        self.target = Some(value);
        self
    }

    /// value / reference: how many times the reference's figure this one is.
    pub fn ratio(&self) -> Option<f64> {
        let reference = self.reference.as_ref()?.value;
        (reference != 0.0 && self.value.is_finite()).then(|| self.value / reference)
    }

    /// Whether the figure reaches its target.
    pub fn meets_target(&self) -> Option<bool> {
        let target = self.target?;
        Some(match self.better {
            Better::Lower => self.value <= target,
            Better::Higher => self.value >= target,
        })
    }

    /// Appends the figure to the report being gathered, if one is (`BENCH_REPORT_DIR`).
    /// A figure that cannot be kept is said on stderr: the bench's printed figures stand.
    pub fn record(self) {
        let Some(dir) = std::env::var_os(DIR_VARIABLE).map(PathBuf::from) else {
            return;
        };
        if let Err(e) = append(&dir, &self) {
            eprintln!(
                "bench report: cannot keep figure {:?} of {} in {}: {e}",
                self.name,
                self.bench,
                dir.display()
            );
        }
    }
}

fn append(dir: &std::path::Path, figure: &Figure) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut line = serde_json::to_string(figure)?;
    line.push('\n');
    // One write per line with O_APPEND: lines of benches that overlap do not interleave.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(FIGURES_FILE))?
        .write_all(line.as_bytes())
}

/// Reads the figures recorded in `dir`, in the order they were recorded; a line that is
/// not a figure is an error naming its number.
pub fn read_figures(dir: &std::path::Path) -> anyhow::Result<Vec<Figure>> {
    use anyhow::Context;
    let path = dir.join(FIGURES_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            serde_json::from_str(line)
                .with_context(|| format!("{} line {}: not a figure", path.display(), n + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_figures_are_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let figures = vec![
            lower("qemu_boot", "start p50", 309.0, "ms").beside("bare QEMU", 274.0),
            higher("api_vs_etcd", "creates", 4226.0, "creates/s").target(8000.0),
        ];
        for f in &figures {
            append(dir.path(), f).unwrap();
        }
        assert_eq!(read_figures(dir.path()).unwrap(), figures);
    }

    #[test]
    fn a_damaged_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), &lower("a", "b", 1.0, "ms")).unwrap();
        std::fs::write(
            dir.path().join(FIGURES_FILE),
            std::fs::read_to_string(dir.path().join(FIGURES_FILE)).unwrap() + "{oops\n",
        )
        .unwrap();
        let error = format!("{:#}", read_figures(dir.path()).unwrap_err());
        assert!(error.contains("line 2: not a figure"), "{error}");
    }

    #[test]
    fn ratios_and_targets_follow_which_way_is_better() {
        let start = lower("q", "start", 300.0, "ms")
            .beside("bare", 250.0)
            .target(260.0);
        assert_eq!(start.ratio(), Some(1.2));
        assert_eq!(start.meets_target(), Some(false));
        let rate = higher("e", "creates", 5000.0, "/s").target(4000.0);
        assert_eq!(rate.ratio(), None);
        assert_eq!(rate.meets_target(), Some(true));
        assert_eq!(lower("q", "x", 1.0, "ms").beside("zero", 0.0).ratio(), None);
    }
}
