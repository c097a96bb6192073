//! What the CLI tests share: the built `inpath` as an [`inpath_testkit::run::Program`] (bounded
//! in time, failures that show what it printed), and a `store serve` on loopback that stops
//! when dropped.

use inpath_testkit::run::Program;
use std::path::Path;
use std::process::{Command, Output};

/// The built `inpath`, run in `dir`.
pub fn program(dir: &Path) -> Program {
    Program::new(env!("CARGO_BIN_EXE_inpath")).in_dir(dir)
}

/// The built `inpath` as a [`Command`] (for pipes, environment and limits).
pub fn command() -> Command {
    Command::new(env!("CARGO_BIN_EXE_inpath"))
}

pub fn inpath(dir: &Path, args: &[&str]) -> Output {
    program(dir).run(args)
}

pub fn ok(dir: &Path, args: &[&str]) -> String {
    program(dir).ok(args)
}

/// Runs `args`, which must fail with a message; returns it.
pub fn fails(dir: &Path, args: &[&str]) -> String {
    program(dir).fails(args, "")
}

/// Runs `args`, which must succeed and print JSON.
pub fn ok_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let text = ok(dir, args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {text}"))
}

/// A running `inpath store serve`, stopped when dropped.
pub struct Server {
    child: std::process::Child,
    pub addr: String,
}

impl Server {
    pub fn start(dir: &Path, args: &[&str]) -> Server {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_inpath"))
            .current_dir(dir)
            .args(["store", "serve"])
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start inpath store serve");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("server said {line:?}"))
            .to_string();
        Server { child, addr }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends one raw request frame and returns the answer's JSON.
pub fn raw_call(stream: &mut std::net::TcpStream, body: &[u8]) -> serde_json::Value {
    use std::io::{Read, Write};
    stream
        .write_all(&(body.len() as u32).to_le_bytes())
        .unwrap();
    stream.write_all(body).unwrap();
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).unwrap();
    let mut buf = vec![0u8; u32::from_le_bytes(len) as usize];
    stream.read_exact(&mut buf).unwrap();
    serde_json::from_slice(&buf).unwrap()
}
