//! The black-box test harness: starts the real `virtplane` binary on a free port in a
//! temporary data dir and talks HTTPS to it with the credentials it writes. One server per
//! test binary (killed at exit) or one a test owns, a per-test HTTPS client, object
//! builders, Status assertions and a watch reader.
//!
//! Every test binary includes this module and uses a different part of it.
#![allow(dead_code)]

mod api;
mod kubeconfig;
mod lease;
mod node;
mod objects;
mod replies;
mod server;
mod watch;

use std::sync::{Mutex, OnceLock};

pub use api::*;
pub use kubeconfig::*;
#[allow(unused_imports)]
pub use lease::*;
#[allow(unused_imports)]
pub use node::*;
pub use objects::*;
pub use replies::*;
pub use server::*;
pub use watch::*;

static SHARED: OnceLock<Mutex<TestServer>> = OnceLock::new();

/// Kills the shared server and removes its data dir when the test binary exits.
extern "C" fn stop_shared() {
    if let Some(server) = SHARED.get() {
        if let Ok(mut server) = server.lock() {
            server.kill9();
            let _ = std::fs::remove_dir_all(server.data_dir());
        }
    }
}

/// The server shared by every test of this binary, started on first use.
pub async fn api() -> Api {
    let (url, dir) = {
        let server = start_once(&SHARED, TestServer::start, stop_shared);
        (server.url.clone(), server.data_dir().to_path_buf())
    };
    Api::connect(&url, &dir)
}

/// An `Api` on a server a test owns.
pub fn api_for(server: &TestServer) -> Api {
    server.api()
}
