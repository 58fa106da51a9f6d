//! Errors of the command-line tool: what failed, why, and with which exit code.

use std::fmt;

/// Exit code for usage and operation errors.
pub const EXIT_FAILURE: i32 = 1;

/// Why something failed.
#[derive(Debug)]
pub enum Error {
    /// An engine error.
    Fs(lanefs::Error),
    /// A host I/O error.
    Io(std::io::Error),
    /// Too many symbolic links while resolving a path (ELOOP).
    Loop,
    /// Anything else, already worded.
    Msg(String),
}

impl Error {
    /// A worded error.
    pub fn msg(s: impl Into<String>) -> Error {
        Error::Msg(s.into())
    }

    /// Whether this is "no such file or directory", from the engine or the host.
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Fs(e) => *e == lanefs::Error::NotFound,
            Error::Io(e) => e.kind() == std::io::ErrorKind::NotFound,
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Fs(e) => write!(f, "{e}"),
            Error::Io(e) => write!(f, "{}", io_text(e)),
            Error::Loop => write!(f, "too many levels of symbolic links"),
            Error::Msg(s) => write!(f, "{s}"),
        }
    }
}

impl From<lanefs::Error> for Error {
    fn from(e: lanefs::Error) -> Error {
        Error::Fs(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(e)
    }
}

/// A host I/O error worded like the engine's: lower case, without "(os error N)".
pub fn io_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    let s = match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    };
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => s,
    }
}

/// A failed command: the object it failed on, the error, and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// What failed: a path, an argument; empty when nothing in particular.
    pub what: String,
    /// Why.
    pub error: Error,
    /// Process exit code.
    pub code: i32,
}

impl Failure {
    /// A failure on `what` with exit code 1.
    pub fn new(what: impl fmt::Display, error: impl Into<Error>) -> Failure {
        Failure {
            what: what.to_string(),
            error: error.into(),
            code: EXIT_FAILURE,
        }
    }

    /// The same failure with another exit code.
    pub fn with_code(mut self, code: i32) -> Failure {
        self.code = code;
        self
    }

    /// The one line printed for this failure of `command`.
    pub fn line(&self, command: &str) -> String {
        let text = if self.what.is_empty() {
            format!("lanefs: {command}: {}", self.error)
        } else {
            format!("lanefs: {command}: {}: {}", self.what, self.error)
        };
        one_line(&text)
    }
}

/// The running command's name (`mkfs`, `cp`, ...), for messages.
static COMMAND: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Record the running command's name (once, before it runs).
pub fn set_command(name: &'static str) {
    let _ = COMMAND.set(name);
}

/// The running command's name ("error" before one is set).
pub fn command() -> &'static str {
    COMMAND.get().copied().unwrap_or("error")
}

/// Print a note that does not change the outcome: `lanefs: CMD: note: TEXT`.
pub fn note(text: &str) {
    eprintln!(
        "{}",
        one_line(&format!("lanefs: {}: note: {text}", command()))
    );
}

/// `s` with line breaks replaced, so that it prints as one line.
pub fn one_line(s: &str) -> String {
    s.trim_end().replace(['\n', '\r'], " ")
}

/// Result of a command step.
pub type CmdResult<T> = Result<T, Failure>;

/// Attach "what failed" to an error.
pub trait Context<T> {
    /// Turn the error into a [`Failure`] on `what`.
    fn ctx(self, what: impl fmt::Display) -> CmdResult<T>;
}

impl<T, E: Into<Error>> Context<T> for Result<T, E> {
    fn ctx(self, what: impl fmt::Display) -> CmdResult<T> {
        self.map_err(|e| Failure::new(what, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_text_is_lower_case_without_os_error() {
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(io_text(&e), "no such file or directory");
    }

    #[test]
    fn line_has_command_what_and_error() {
        let f = Failure::new("disk.img:/a/b", lanefs::Error::NotFound);
        assert_eq!(
            f.line("cat"),
            "lanefs: cat: disk.img:/a/b: no such file or directory"
        );
        let f = Failure::new("", Error::msg("bad\nthing"));
        assert_eq!(f.line("cp"), "lanefs: cp: bad thing");
    }
}
