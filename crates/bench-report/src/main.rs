//! `bench-report`: writes the report of one `scripts/bench` run from the figures its
//! benches recorded, beside the last report kept in the same directory.
//!
//!     bench-report --dir bench-report --figures target/bench-figures \
//!         --benches qemu_boot,migration [--failed migration] [--smoke]

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

use bench_report::machine::Machine;
use bench_report::render::{render, Run, KEPT_FILE, VS_LAST_SVG, VS_REFERENCE_SVG};

#[derive(Parser)]
#[command(about = "Writes the bench report from the figures the benches recorded")]
struct Args {
    /// The report's directory; the report kept there is the one this run is compared with.
    #[arg(long)]
    dir: PathBuf,
    /// Where the benches appended their figures (their BENCH_REPORT_DIR).
    #[arg(long)]
    figures: PathBuf,
    /// The benches that were asked for, in order.
    #[arg(long, value_delimiter = ',')]
    benches: Vec<String>,
    /// The benches that did not run through.
    #[arg(long, value_delimiter = ',')]
    failed: Vec<String>,
    /// The run was the smoke profile (not a measurement).
    #[arg(long)]
    smoke: bool,
    /// A paragraph for the report's reader (how the run was made, what went wrong).
    #[arg(long)]
    note: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let figures = bench_report::read_figures(&args.figures)?;
    let kept = args.dir.join(KEPT_FILE);
    let last: Option<Run> = match std::fs::read_to_string(&kept) {
        Ok(text) => Some(
            serde_json::from_str(&text)
                .with_context(|| format!("{} is not a kept report", kept.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", kept.display())),
    };
    let run = Run {
        taken: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        smoke: args.smoke,
        machine: Machine::describe(),
        benches: args.benches,
        failed: args.failed,
        figures,
        note: args.note,
    };
    // A smoke run is never the "last report" a measured one is compared with.
    let last = last.filter(|l| l.smoke == run.smoke);
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    // Charts the last report drew and this one may not.
    for stale in [VS_REFERENCE_SVG, VS_LAST_SVG] {
        match std::fs::remove_file(args.dir.join(stale)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot remove the old {stale}"))
            }
            _ => {}
        }
    }
    for (name, contents) in render(&run, last.as_ref())? {
        let path = args.dir.join(&name);
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!(
        "bench report: {} figures of {} benches in {}",
        run.figures.len(),
        run.benches.len(),
        args.dir.join("README.md").display()
    );
    Ok(())
}
