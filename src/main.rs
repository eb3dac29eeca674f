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
        #[expect(
            clippy::disallowed_methods,
            reason = "the one place the process ends: everything below returns its error here"
        )]
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

/// One `tracing` subscriber, which also receives Pingora's `log` records. `RUST_LOG` wins,
/// except that Pingora's debug and trace records are never written: they print whole request
/// and response headers, the upstream credentials included.
fn init_logging(level: &str, format: LogFormat) {
    use tracing_subscriber::filter::filter_fn;
    use tracing_subscriber::prelude::*;

    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{level},tokio_postgres=warn")));
    let no_header_dumps = filter_fn(|meta| {
        !(meta.target().starts_with("pingora") && *meta.level() > tracing::Level::INFO)
    });
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(no_header_dumps);
    // Colours for a terminal only: a log file or collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Json => registry.with(fmt.json()).try_init(),
        LogFormat::Text => registry.with(fmt).try_init(),
    };
}
