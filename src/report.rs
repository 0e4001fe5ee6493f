//! Progress on a terminal: one bar per layer being read (bytes scanned) and per upload. When
//! stderr is not a terminal (CI), or with `-q`, there are no bars: log lines say what happened.
//! The log subscriber is set up here too.

use std::io::{self};
use std::sync::OnceLock;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

static BARS: OnceLock<Option<MultiProgress>> = OnceLock::new();

/// Turns progress bars on for this process when stderr is a terminal and output is not quiet.
pub fn init(show: bool) {
    let on = show
        && std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("TERM").is_some_and(|t| t != "dumb");
    let _ = BARS.set(on.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr())));
    if on {
        runner_patch::progress::listen(std::sync::Arc::new(Bars));
    }
}

/// Sets up logging on stderr (and progress bars): `-v` debug, `-vv` trace, `-q` errors only,
/// `RUNNER_PATCH_LOG` a filter of its own; inside GitHub Actions warnings go out as
/// `::warning::` commands instead of log lines.
pub fn init_logging(verbose: u8, quiet: bool) {
    init(!quiet);
    let default = if quiet {
        "error"
    } else {
        match verbose {
            0 => "warn,runner_patch=info",
            1 => "info,runner_patch=debug",
            _ => "debug,runner_patch=trace",
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUNNER_PATCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let ansi = std::env::var_os("NO_COLOR").is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    // In GitHub Actions warnings go out once, as `::warning::` commands (annotations).
    let actions = crate::summary::in_actions();
    let log = tracing_subscriber::fmt::layer()
        .with_writer(LogWriter)
        .with_ansi(ansi)
        .with_target(false)
        .without_time()
        .with_filter(tracing_subscriber::filter::filter_fn(move |m| {
            !(actions && *m.level() == tracing::Level::WARN)
        }));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(log)
        .with(actions.then_some(crate::summary::WarningCommands))
        .try_init();
}

/// The library's progress, drawn as one bar per task.
struct Bars;

impl runner_patch::progress::Listener for Bars {
    fn start(&self, label: String, total: u64) -> Box<dyn runner_patch::progress::Task> {
        Box::new(BarTask(bar(label, total)))
    }
}

struct BarTask(ProgressBar);

impl runner_patch::progress::Task for BarTask {
    fn advance(&mut self, bytes: u64) {
        self.0.inc(bytes);
    }
}

impl Drop for BarTask {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// The shared bar container, for log output that must not tear the bars.
pub fn multi() -> Option<&'static MultiProgress> {
    BARS.get().and_then(Option::as_ref)
}

/// A byte-counting bar (hidden when bars are off).
pub fn bar(label: String, total: u64) -> ProgressBar {
    match multi() {
        Some(m) => {
            let color = std::env::var_os("NO_COLOR").is_none();
            let tmpl = if color {
                "{prefix:>40.cyan} {bar:30.green/dim} {bytes:>10}/{total_bytes:<10} {bytes_per_sec:>12}"
            } else {
                "{prefix:>40} {bar:30} {bytes:>10}/{total_bytes:<10} {bytes_per_sec:>12}"
            };
            let pb = m.add(ProgressBar::new(total));
            pb.set_style(
                ProgressStyle::with_template(tmpl)
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            pb.set_prefix(label);
            pb
        }
        None => ProgressBar::hidden(),
    }
}

/// A `tracing` writer that prints above the bars instead of through them.
#[derive(Clone, Copy)]
pub struct LogWriter;

impl io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match multi() {
            Some(m) => {
                let text = String::from_utf8_lossy(buf);
                let text = text.trim_end_matches('\n');
                m.suspend(|| eprintln!("{text}"));
                Ok(buf.len())
            }
            None => io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> Self::Writer {
        *self
    }
}
