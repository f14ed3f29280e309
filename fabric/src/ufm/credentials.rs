//! The UFM credentials file: one line `username:password`, readable by its owner only.
//!
//! Format: the first line of the file, split at the first `:` (so the password may hold
//! `:`; a user name cannot, as in HTTP basic auth). A trailing newline (`\n` or `\r\n`)
//! is dropped; nothing else is trimmed, so spaces in a password are kept. Lines after
//! the first are ignored. Like ssh with a private key, a file that group or others may
//! read or write (`mode & 0o077 != 0`) is refused: the password would leak.

use std::fmt;
use std::path::Path;

use super::UfmError;

/// User name and password for HTTP basic auth. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .finish()
    }
}

impl Credentials {
    /// Reads and checks the file at `path` (permissions first, then the content).
    pub fn load(path: &Path) -> Result<Self, UfmError> {
        let bad = |why: String| UfmError::Credentials {
            path: path.to_path_buf(),
            why,
        };
        check_mode(path)?;
        let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
        Self::parse(&text).map_err(|e| bad(e.to_string()))
    }

    /// Parses the file's content; the error says what was expected.
    pub fn parse(text: &str) -> Result<Self, CredentialsError> {
        let line = text.split('\n').next().unwrap_or_default();
        let line = line.strip_suffix('\r').unwrap_or(line);
        let Some((username, password)) = line.split_once(':') else {
            return Err(if line.trim().is_empty() {
                CredentialsError::EmptyLine
            } else {
                CredentialsError::NoColon
            });
        };
        if username.trim().is_empty() {
            return Err(CredentialsError::EmptyUser);
        }
        if password.is_empty() {
            return Err(CredentialsError::EmptyPassword);
        }
        Ok(Credentials {
            username: username.to_string(),
            password: password.to_string(),
        })
    }

    /// The `Authorization` header value: `Basic base64(username:password)`.
    pub fn basic_auth_header(&self) -> String {
        format!(
            "Basic {}",
            base64(format!("{}:{}", self.username, self.password).as_bytes())
        )
    }
}

/// What is wrong with the content of a credentials file. The messages repeat the expected
/// form, since the person reading them has the file open and nothing else.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    #[error("expected one line `username:password`, got an empty first line")]
    EmptyLine,
    #[error("expected one line `username:password`, got a line without `:`")]
    NoColon,
    #[error("expected one line `username:password`, got an empty user name")]
    EmptyUser,
    #[error("expected one line `username:password`, got an empty password")]
    EmptyPassword,
}

/// Refuses files that group or others can access, as ssh does for private keys.
#[cfg(unix)]
fn check_mode(path: &Path) -> Result<(), UfmError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| UfmError::Credentials {
        path: path.to_path_buf(),
        why: format!("cannot read it: {e}"),
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(UfmError::Credentials {
            path: path.to_path_buf(),
            why: format!(
                "its mode {mode:04o} lets group or others access it; expected 0600 or 0400 \
                 (run `chmod 600 {}`)",
                path.display()
            ),
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_mode(_path: &Path) -> Result<(), UfmError> {
    Ok(())
}

/// Standard base64 with padding (RFC 4648 §4); basic auth is its only use here.
fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want, "{input:?}");
        }
        let c = Credentials::parse("admin:123456\n").unwrap();
        assert_eq!(c.basic_auth_header(), "Basic YWRtaW46MTIzNDU2");
    }

    #[test]
    fn parse_keeps_colons_and_spaces_in_password() {
        let c = Credentials::parse("admin:a:b c \r\nignored").unwrap();
        assert_eq!(c.username, "admin");
        assert_eq!(c.password, "a:b c ");
        assert!(!format!("{c:?}").contains("a:b"));
    }

    #[test]
    fn parse_errors_say_what_was_expected() {
        for (text, part) in [
            ("", "empty first line"),
            ("admin\n", "without `:`"),
            (":pw\n", "empty user name"),
            ("admin:\n", "empty password"),
        ] {
            let e = Credentials::parse(text).unwrap_err().to_string();
            assert!(e.contains(part), "{text:?}: {e}");
            assert!(e.contains("username:password"), "{e}");
        }
    }
}
