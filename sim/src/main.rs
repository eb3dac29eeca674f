//! The `tollgate-sim` binary: parse the flags, listen, print the one banner line, serve.
//! Everything else is the library (`lib.rs`), which tests can also run in-process.

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use tollgate_sim::{runtime, serve, Options};

fn main() -> ExitCode {
    let opts = Options::parse();
    match runtime(opts.threads) {
        Ok(rt) => rt.block_on(run(opts)),
        Err(e) => {
            eprintln!("tollgate-sim: cannot start runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(opts: Options) -> ExitCode {
    if let Err(e) = opts.tls() {
        eprintln!("tollgate-sim: cannot serve TLS: {e}");
        return ExitCode::FAILURE;
    }
    let listener = match tokio::net::TcpListener::bind(&opts.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tollgate-sim: cannot listen on {}: {e}", opts.listen);
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(addr) => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "tollgate-sim listening on {}://{addr}", opts.scheme());
            let _ = out.flush();
        }
        Err(e) => {
            eprintln!("tollgate-sim: {e}");
            return ExitCode::FAILURE;
        }
    }
    match serve(listener, opts).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate-sim: server error: {e}");
            ExitCode::FAILURE
        }
    }
}
