//! Pieces every command shares: error reporting and exit codes, progress bars, output helpers.

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Prints an error with its whole cause chain and exits non-zero; exits quietly with 0 when the
/// reader of our output went away (`inpath ... | head`).
pub fn exit_with(result: anyhow::Result<()>) -> ! {
    match result {
        Ok(()) => std::process::exit(0),
        Err(err) => {
            if is_broken_pipe(&err) {
                std::process::exit(0);
            }
            let mut message = format!("error: {err}");
            for cause in err.chain().skip(1) {
                let cause = cause.to_string();
                if !message.contains(&cause) {
                    message.push_str(&format!("\n  caused by: {cause}"));
                }
            }
            eprintln!("{message}");
            std::process::exit(1);
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Writes `text` to standard output, returning broken-pipe errors so they exit quietly.
pub fn print_out(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// A progress bar on standard error, shown only when standard error is a terminal and the work
/// is large enough to be worth watching.
pub struct Progress {
    bar: Option<ProgressBar>,
    base: u64,
}

impl Progress {
    /// A bar for `total` bytes (unknown for pipes) labelled `label`. Hidden when `quiet`, when
    /// standard error is not a terminal, or when the known total is under 64 MiB.
    pub fn new(total: Option<u64>, label: &str, quiet: bool) -> Progress {
        let visible =
            !quiet && std::io::stderr().is_terminal() && total.is_none_or(|t| t >= 64 << 20);
        if !visible {
            return Progress { bar: None, base: 0 };
        }
        let bar = match total {
            Some(total) => {
                let bar = ProgressBar::new(total);
                bar.set_style(
                    ProgressStyle::with_template(
                        "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
                    )
                    .expect("valid template")
                    .progress_chars("=> "),
                );
                bar
            }
            None => {
                let bar = ProgressBar::new_spinner();
                bar.set_style(
                    ProgressStyle::with_template("{msg} {spinner} {bytes} {binary_bytes_per_sec}")
                        .expect("valid template"),
                );
                bar
            }
        };
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(8));
        bar.enable_steady_tick(Duration::from_millis(250));
        bar.set_message(label.to_string());
        Progress {
            bar: Some(bar),
            base: 0,
        }
    }

    /// Starts counting a new input whose bytes add to the ones before.
    pub fn next_input(&mut self) {
        if let Some(bar) = &self.bar {
            self.base = bar.position();
        }
    }

    /// Sets the bytes read of the current input.
    pub fn set(&self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(self.base + bytes);
        }
    }

    /// Removes the bar.
    pub fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Formats a count with thousands separators: 1234567 -> "1,234,567".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Formats a byte count with a binary unit: 1536 -> "1.5 KiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A value parser over one of an engine's own enums (`inpath_corr::DType`,
/// `inpath_sketch::HashMode`, ...): the names it takes, and lists in `--help` and in errors,
/// are the engine's (`name` of each of `all`), so the CLI never mirrors an engine type by hand
/// and a new variant reaches the command line by itself. `about`, when given, is each value's
/// line in `--help`.
pub fn engine_values<T: Copy + Send + Sync + 'static>(
    all: &'static [T],
    name: fn(T) -> &'static str,
    about: Option<fn(T) -> &'static str>,
) -> impl clap::builder::TypedValueParser<Value = T> {
    let values = all.iter().map(move |&v| {
        let value = clap::builder::PossibleValue::new(name(v));
        match about {
            Some(about) => value.help(about(v)),
            None => value,
        }
    });
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(values).map(move |s| {
        *all.iter()
            .find(|&&v| name(v) == s)
            .expect("clap checked it is one of the names")
    })
}

/// `--json`, defined once: print the result as one JSON document (the fields each command's
/// page in docs/ lists) instead of text. A command flattens it and gives its own help line
/// with `#[command(mut_arg("json", |a| a.help("...")))]` where "Print JSON" is not enough.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct Json {
    /// Print JSON.
    #[arg(long = "json", id = "json")]
    pub on: bool,
}

/// `--key-file` and `--allow-insecure-key-file`, defined once for every command that reads
/// keys: a key file of `inpath seal keygen`, refused when group or others can read it unless
/// the second flag is given. A command flattens it and says what the keys are for with
/// `#[command(mut_arg("key_file", |a| a.help("...")))]` where the general line is not enough.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct KeyFile {
    /// Key file for sealed pages (see `inpath seal keygen`); must be chmod 600.
    #[arg(long)]
    pub key_file: Option<std::path::PathBuf>,
    /// Use a key file even when group or others can read it (not recommended).
    #[arg(long)]
    pub allow_insecure_key_file: bool,
}

impl KeyFile {
    /// The keys of the file, or an empty ring when none was given.
    pub fn ring(&self) -> anyhow::Result<inpath_seal::KeyRing> {
        Ok(match &self.key_file {
            Some(path) => read_keys(path, self.allow_insecure_key_file)?.ring,
            None => inpath_seal::KeyRing::new(),
        })
    }
}

/// Reads a key file. Like ssh, refuses one that group or others may read unless
/// `allow_insecure` (then it warns); a file that does not parse gets a message naming the
/// expected format and `inpath seal keygen`.
pub fn read_keys(
    path: &std::path::Path,
    allow_insecure: bool,
) -> anyhow::Result<inpath_seal::keyfile::KeyFile> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read key file {}", path.display()))?;
    if meta.is_dir() {
        bail!("cannot read key file {}: is a directory", path.display());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            if !allow_insecure {
                bail!(
                    "key file {} has mode {mode:04o}: group or others can read it, so its keys may \
                     already be exposed; make it private with `chmod 600 {}` (or pass \
                     --allow-insecure-key-file to use it anyway)",
                    path.display(),
                    path.display()
                );
            }
            eprintln!(
                "warning: key file {} has mode {mode:04o} (readable by others; chmod 600 it)",
                path.display()
            );
        }
    }
    let bytes = zeroize::Zeroizing::new(
        inpath_core::source::read_bounded(path, "a key file", 1 << 20)
            .with_context(|| format!("cannot read key file {}", path.display()))?,
    );
    inpath_seal::keyfile::parse_bytes(bytes).with_context(|| format!("key file {}", path.display()))
}

/// `--threads`, defined once for every command: lanes or worker threads, 1 to
/// [`inpath_core::lanes::MAX_THREADS`] ([`parse_threads`], checked when the command line is
/// read). A command flattens it (`#[command(flatten)] threads: Threads`) and states its own
/// help line, default and short name (`-t`, `-j`) with
/// `#[command(mut_arg("threads", |a| a.help("... [default: 1]").short('t')))]`; its code asks
/// for the value with its default ([`Threads::or`]) or for what was given ([`Threads::given`]).
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct Threads {
    /// Lanes (threads) to split the work across.
    #[arg(long = "threads", id = "threads", value_name = "THREADS", value_parser = parse_threads)]
    n: Option<usize>,
}

impl Threads {
    /// The count given, or `default` (the command's, as its help says).
    pub fn or(self, default: usize) -> usize {
        self.n.unwrap_or(default)
    }

    /// The count given, if any.
    pub fn given(self) -> Option<usize> {
        self.n
    }
}

/// The one rule for every command's `--threads` (and `cache serve -t`): 1 to
/// [`inpath_core::lanes::MAX_THREADS`], checked when the command line is read.
pub fn parse_threads(text: &str) -> Result<usize, String> {
    let n: usize = text.trim().parse().map_err(|_| {
        format!(
            "{text:?} is not a thread count: a whole number from 1 to {}",
            inpath_core::lanes::MAX_THREADS
        )
    })?;
    inpath_core::lanes::check_threads(n).map_err(|e| e.to_string())?;
    Ok(n)
}

/// The one rule for a server's most simultaneous connections (`cache serve -c`, `store serve
/// --max-conns`, and the wire server's own check): 1 to 1,000,000.
pub fn parse_max_connections(text: &str) -> Result<usize, String> {
    text.trim()
        .parse()
        .ok()
        .filter(|n| (1..=1_000_000).contains(n))
        .ok_or_else(|| format!("max connections = {text} is out of range: 1 to 1,000,000"))
}

pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 4096, 64KiB or 16MiB"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?} (use KiB, MiB or GiB)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// SplitMix64: a small, fixed-seed generator, so demo data and generated loads are the same on
/// every machine.
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, 1).
    pub fn unit_below_one(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}
