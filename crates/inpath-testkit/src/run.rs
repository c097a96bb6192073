//! Running a built program (the `inpath` binary) as a child process in a test: in a chosen
//! directory, with standard input, bounded in time, with assertions whose failure messages show
//! the arguments, the exit status and what the program printed.
//!
//! ```no_run
//! use inpath_testkit::run::Program;
//! // In a test of the CLI crate: Program::new(env!("CARGO_BIN_EXE_inpath")).
//! let inpath = Program::new("target/release/inpath").in_dir("/tmp");
//! let text = inpath.ok(&["sketch", "--help"]);
//! assert!(text.contains("--threads"));
//! let message = inpath.fails(&["sketch", "--threads", "0", "x"], "out of range");
//! assert!(message.contains("1 to 256"));
//! ```

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a run may take before it is killed and the test fails, unless
/// [`Program::timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// A program under test and where it runs.
#[derive(Clone, Debug)]
pub struct Program {
    path: PathBuf,
    dir: Option<PathBuf>,
    timeout: Duration,
}

impl Program {
    /// The program at `path`, run in the test's working directory.
    pub fn new(path: impl Into<PathBuf>) -> Program {
        Program {
            path: path.into(),
            dir: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same program, run in `dir`.
    pub fn in_dir(&self, dir: impl AsRef<Path>) -> Program {
        Program {
            dir: Some(dir.as_ref().to_path_buf()),
            ..self.clone()
        }
    }

    /// The same program with another time bound.
    pub fn timeout(&self, timeout: Duration) -> Program {
        Program {
            timeout,
            ..self.clone()
        }
    }

    /// A [`Command`] for `args`, in the program's directory (to add environment, limits or
    /// pipes before running it with [`Program::run_command`]).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.path);
        cmd.args(args);
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        cmd
    }

    /// Runs `args` with no standard input; returns what it printed and how it ended.
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_command(self.command(args), None, &format!("{args:?}"))
    }

    /// Runs `args` with `input` on standard input.
    pub fn run_with_input(&self, args: &[&str], input: &[u8]) -> Output {
        self.run_command(self.command(args), Some(input), &format!("{args:?}"))
    }

    /// Runs `cmd` (its standard output and error captured), feeding it `input` if any, and
    /// kills it if it outlives the time bound; `what` names it in a failure.
    pub fn run_command(&self, mut cmd: Command, input: Option<&[u8]>, what: &str) -> Output {
        cmd.stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: cannot start {}: {e}", self.path.display()));
        // Readers on their own threads, so a child that fills one pipe never blocks.
        let drain = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut bytes);
                }
                bytes
            })
        };
        let stdout = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let stderr = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            // A program that exits before reading all of it closes the pipe: not an error here.
            let _ = stdin.write_all(bytes);
        }
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("{what}: still running after {:?}; killed", self.timeout);
                }
                Err(e) => panic!("{what}: cannot wait for the program: {e}"),
            }
        };
        Output {
            status,
            stdout: stdout.join().unwrap_or_default(),
            stderr: stderr.join().unwrap_or_default(),
        }
    }

    /// Runs `args`, which must succeed; returns standard output as text.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        expect_success(&format!("{args:?}"), &out);
        String::from_utf8(out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: output is not UTF-8: {e}"))
    }

    /// Runs `args`, which must fail with a message: exit status 1 or 2 (not a signal, not a
    /// panic), `needle` in standard error. Returns standard error.
    pub fn fails(&self, args: &[&str], needle: &str) -> String {
        let out = self.run(args);
        expect_failure(&format!("{args:?}"), &out, needle)
    }
}

/// Panics, showing what the program printed, unless it exited with status 0.
pub fn expect_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stderr\n{}\n--- stdout\n{}",
        describe(out.status),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Panics unless the program failed cleanly (exit status 1 or 2, no panic) with `needle` in
/// its standard error; returns standard error.
pub fn expect_failure(what: &str, out: &Output, needle: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "{what} should fail with status 1 or 2, it ended with {}:\n--- stderr\n{stderr}\n--- stdout\n{}",
        describe(out.status),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains(needle),
        "{what}: standard error lacks {needle:?}:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what} panicked:\n{stderr}");
    stderr
}

fn describe(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exit status {code}"),
        None => format!("{status} (a signal)"),
    }
}
