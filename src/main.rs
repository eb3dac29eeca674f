//! The `tollgate` binary: parse the command line, load the conf, dispatch.

use clap::Parser;
use tracing_subscriber::EnvFilter;

use tollgate::cli::{self, Cli, CliError, Command};
use tollgate::config::LogFormat;
use tollgate::server::{self, ServeOptions};

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("tollgate: {e}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<(), CliError> {
    let config = cli::load_config(&cli.conf)?;
    init_logging(&config.tollgate.log.level, config.tollgate.log.format);
    match cli.command {
        Command::Serve { upgrade, daemon } => {
            Ok(server::serve(config, ServeOptions { upgrade, daemon })?)
        }
        _ => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(cli::run(cli, config)),
    }
}

/// One `tracing` subscriber, which also receives Pingora's `log` records. `RUST_LOG` wins.
fn init_logging(level: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{level},tokio_postgres=warn")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
