//! Embeds the web console (`ui/dist`, built by `scripts/build-ui`) when it is there:
//! each file gzipped once here, so the binary serves it compressed with no work per
//! request. Without it the server still serves the API and says at `/ui/` how to get it.

use std::io::Write;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let dist = manifest.join("../../ui/dist");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        println!("cargo:rerun-if-changed={}", dist.display());
        collect(&dist, &dist, &mut files);
    } else {
        // Not built yet: ui/ is then only sources (no node_modules without npm), and a
        // dist that appears in it makes this run again.
        println!(
            "cargo:rerun-if-changed={}",
            manifest.join("../../ui").display()
        );
    }
    files.sort();
    let gz_dir = out.join("ui");
    let _ = std::fs::remove_dir_all(&gz_dir);
    let mut table = String::from("pub static ASSETS: &[Asset] = &[\n");
    for (i, (name, path)) in files.iter().enumerate() {
        let bytes = std::fs::read(path).expect("a ui/dist file is readable");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&bytes).expect("gzip in memory");
        let gz_path = gz_dir.join(format!("{i}.gz"));
        std::fs::create_dir_all(&gz_dir).expect("OUT_DIR is writable");
        std::fs::write(&gz_path, gz.finish().expect("gzip in memory"))
            .expect("OUT_DIR is writable");
        table.push_str(&format!(
            "    Asset {{ path: {name:?}, gzipped: include_bytes!({:?}), size: {} }},\n",
            gz_path.display().to_string(),
            bytes.len()
        ));
    }
    table.push_str("];\n");
    std::fs::write(out.join("ui_assets.rs"), table).expect("OUT_DIR is writable");
}

/// Every file under `dir` as (path relative to `root` with `/`, full path).
fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, files);
        } else if let Ok(relative) = path.strip_prefix(root) {
            let name = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            files.push((name, path));
        }
    }
}
