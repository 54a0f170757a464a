//! The console's files, embedded gzipped by `build.rs` from `ui/dist`.

pub struct Asset {
    /// The path under `/ui/`, e.g. `index.html`, `assets/app-1a2b3c.js`.
    pub path: &'static str,
    pub gzipped: &'static [u8],
    /// Its size before compression.
    pub size: usize,
}

include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));

pub fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

/// Whether this binary was built with the console.
pub fn built() -> bool {
    find("index.html").is_some()
}

pub fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json" | "map") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("woff2") => "font/woff2",
        Some("woff") => "font/woff",
        Some("ttf") => "font/ttf",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}
