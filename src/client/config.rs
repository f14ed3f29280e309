//! Where the planner is and who we are: flags, then environment, then
//! `~/.config/hyperplan/client.toml`, then defaults. Resolution is a pure function of its
//! inputs (flags, an environment lookup, the parsed file) so the order is testable without
//! touching the process environment.
//!
//! The planner may be a list, `head01:7400,head02:7400` (a leader and its standbys):
//! [`parse_planners`] reads it, `crate::client` tries the addresses in order.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

/// The planner's address when nothing else says.
pub const DEFAULT_PLANNER: &str = "127.0.0.1:7400";
/// The planner's port when an address has none.
pub const DEFAULT_PORT: u16 = 7400;
/// The certificate directory when nothing else says (the layout `hyperplan certs` writes).
pub const DEFAULT_CERT_DIR: &str = "/etc/hyperplan/certs";

pub const ENV_PLANNER: &str = "HYPERPLAN_PLANNER";
pub const ENV_CERT_DIR: &str = "HYPERPLAN_CERT_DIR";
pub const ENV_USER: &str = "HYPERPLAN_USER";

/// Help text shared by every command that talks to the planner.
pub const CONNECTION_HELP: &str = "\
Where the planner is and who you are, first match wins:
  1. flags        --planner HOST:PORT[,HOST:PORT...], --cert-dir DIR, --user NAME
  2. environment  HYPERPLAN_PLANNER, HYPERPLAN_CERT_DIR, HYPERPLAN_USER
  3. config file  $XDG_CONFIG_HOME/hyperplan/client.toml (else ~/.config/hyperplan/client.toml):
                    planner = \"head01:7400\"
                    certDir = \"/home/alice/.hyperplan/certs\"
                    user = \"alice\"
  4. defaults     planner 127.0.0.1:7400, cert dir /etc/hyperplan/certs, user $USER

A leader and its standbys: list them all, comma-separated (head01:7400,head02:7400). A
request goes to the first that answers; a standby names the leader, which is asked
instead; an unreachable one is skipped. `hyperplan planners` shows who leads.

The connection is QUIC with mutual TLS: you present DIR/users/NAME.pem and .key, and check
the planner against DIR/ca.pem. An admin issues yours with
  hyperplan certs issue --user NAME --role user";

/// The connection flags every planner command takes (flattened into each command).
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
#[command(next_help_heading = "Connection")]
pub struct ClientArgs {
    /// The planner's address, or a comma-separated list of a leader and its standbys
    /// [env: HYPERPLAN_PLANNER] [default: 127.0.0.1:7400]
    #[arg(long, value_name = "HOST:PORT[,...]")]
    pub planner: Option<String>,
    /// Directory with ca.pem and users/NAME.pem, .key [env: HYPERPLAN_CERT_DIR] [default:
    /// /etc/hyperplan/certs]
    #[arg(long, value_name = "DIR")]
    pub cert_dir: Option<PathBuf>,
    /// Your user name: picks the certificate users/NAME.pem [env: HYPERPLAN_USER] [default:
    /// $USER]
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
}

/// `client.toml`. Every key is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileConfig {
    pub planner: Option<String>,
    pub cert_dir: Option<PathBuf>,
    pub user: Option<String>,
}

/// Where a setting came from, for error messages ("the planner at X (from
/// HYPERPLAN_PLANNER)").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Flag(&'static str),
    Env(&'static str),
    File(PathBuf),
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag(flag) => write!(f, "from {flag}"),
            Source::Env(var) => write!(f, "from ${var}"),
            Source::File(path) => write!(f, "from {}", path.display()),
            Source::Default => f.write_str("the default"),
        }
    }
}

/// One resolved setting and its origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting<T> {
    pub value: T,
    pub source: Source,
}

/// Everything a command needs to reach the planner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// `HOST:PORT`s (the port may be missing: see [`DEFAULT_PORT`]), at least one, in the
    /// order to try them ([`parse_planners`]).
    pub planner: Setting<Vec<String>>,
    pub cert_dir: Setting<PathBuf>,
    pub user: Setting<String>,
}

impl ClientConfig {
    /// Resolves against the real environment and config file.
    pub fn from_process(flags: &ClientArgs) -> anyhow::Result<Self> {
        let env = |name: &str| std::env::var(name).ok();
        let file = match config_file_path(&env) {
            Some(path) => load_file(&path)?.map(|config| (path, config)),
            None => None,
        };
        resolve(flags, &env, file.as_ref().map(|(p, c)| (p.as_path(), c)))
    }
}

/// `$XDG_CONFIG_HOME/hyperplan/client.toml` (an absolute XDG_CONFIG_HOME only, as the XDG
/// spec says), else `$HOME/.config/hyperplan/client.toml`; `None` without either.
pub fn config_file_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty());
    let base = match set("XDG_CONFIG_HOME").map(PathBuf::from) {
        Some(xdg) if xdg.is_absolute() => xdg,
        _ => PathBuf::from(set("HOME")?).join(".config"),
    };
    Some(base.join("hyperplan").join("client.toml"))
}

/// Reads and parses `path`; `Ok(None)` when it does not exist (the file is optional).
pub fn load_file(path: &Path) -> anyhow::Result<Option<FileConfig>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    parse_file(path, &text).map(Some)
}

/// Parses `client.toml` text; errors name the file.
pub fn parse_file(path: &Path, text: &str) -> anyhow::Result<FileConfig> {
    toml::from_str(text).map_err(|e| {
        anyhow::anyhow!(
            "{}: {}(keys: planner, certDir, user)",
            path.display(),
            with_newline(e.to_string())
        )
    })
}

fn with_newline(mut s: String) -> String {
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// Flags beat the environment, the environment beats the file, the file beats the
/// defaults. Empty values count as unset. The user name must be usable as a certificate
/// file name.
pub fn resolve(
    flags: &ClientArgs,
    env: &dyn Fn(&str) -> Option<String>,
    file: Option<(&Path, &FileConfig)>,
) -> anyhow::Result<ClientConfig> {
    let env_set = |name: &'static str| env(name).filter(|v| !v.is_empty());
    let from_file = |get: &dyn Fn(&FileConfig) -> Option<String>| {
        file.and_then(|(path, config)| {
            get(config)
                .filter(|v| !v.is_empty())
                .map(|v| (v, Source::File(path.to_owned())))
        })
    };
    let pick = |flag: Option<String>,
                flag_name: &'static str,
                var: &'static str,
                get: &dyn Fn(&FileConfig) -> Option<String>|
     -> Option<Setting<String>> {
        flag.filter(|v| !v.is_empty())
            .map(|v| (v, Source::Flag(flag_name)))
            .or_else(|| env_set(var).map(|v| (v, Source::Env(var))))
            .or_else(|| from_file(get))
            .map(|(value, source)| Setting { value, source })
    };

    let planner = pick(flags.planner.clone(), "--planner", ENV_PLANNER, &|c| c.planner.clone()).unwrap_or(Setting {
        value: DEFAULT_PLANNER.to_owned(),
        source: Source::Default,
    });
    let planner = Setting {
        value: parse_planners(&planner.value, &planner.source)?,
        source: planner.source,
    };
    let cert_dir = pick(
        flags.cert_dir.as_ref().map(|p| p.to_string_lossy().into_owned()),
        "--cert-dir",
        ENV_CERT_DIR,
        &|c| c.cert_dir.as_ref().map(|p| p.to_string_lossy().into_owned()),
    )
    .map(|s| Setting {
        value: PathBuf::from(s.value),
        source: s.source,
    })
    .unwrap_or(Setting {
        value: PathBuf::from(DEFAULT_CERT_DIR),
        source: Source::Default,
    });
    let user = pick(flags.user.clone(), "--user", ENV_USER, &|c| c.user.clone())
        .or_else(|| {
            env_set("USER").map(|value| Setting {
                value,
                source: Source::Env("USER"),
            })
        })
        .ok_or_else(|| {
            anyhow::anyhow!("who are you? pass --user NAME, set HYPERPLAN_USER, or put user = \"NAME\" in client.toml")
        })?;
    hyperplan_net::certs::validate_name("user", &user.value).with_context(|| format!("user name {}", user.source))?;
    Ok(ClientConfig {
        planner,
        cert_dir,
        user,
    })
}

/// `HOST:PORT` or `HOST:PORT,HOST:PORT,…` (spaces around the commas allowed): the
/// addresses in order. An empty entry is an error naming the list and where it came from.
pub fn parse_planners(text: &str, source: &Source) -> anyhow::Result<Vec<String>> {
    let list: Vec<String> = text.split(',').map(|a| a.trim().to_owned()).collect();
    if list.iter().any(String::is_empty) {
        anyhow::bail!(
            "the planner address list {text:?} ({source}) has an empty entry; expected HOST:PORT or a \
             comma-separated list HOST:PORT,HOST:PORT"
        );
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;

    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| map.get(name).cloned()
    }

    fn flags(planner: Option<&str>, cert_dir: Option<&str>, user: Option<&str>) -> ClientArgs {
        ClientArgs {
            planner: planner.map(Into::into),
            cert_dir: cert_dir.map(Into::into),
            user: user.map(Into::into),
        }
    }

    fn file(planner: Option<&str>, cert_dir: Option<&str>, user: Option<&str>) -> FileConfig {
        FileConfig {
            planner: planner.map(Into::into),
            cert_dir: cert_dir.map(Into::into),
            user: user.map(Into::into),
        }
    }

    const FULL_ENV: &[(&str, &str)] = &[
        (ENV_PLANNER, "env-host:1"),
        (ENV_CERT_DIR, "/env/certs"),
        (ENV_USER, "envuser"),
        ("USER", "login"),
    ];

    #[test]
    fn flags_beat_everything() {
        let f = file(Some("file-host:2"), Some("/file/certs"), Some("fileuser"));
        let path = Path::new("/home/a/.config/hyperplan/client.toml");
        let c = resolve(
            &flags(Some("flag-host:3"), Some("/flag/certs"), Some("flaguser")),
            &env_of(FULL_ENV),
            Some((path, &f)),
        )
        .unwrap();
        assert_eq!(c.planner.value, ["flag-host:3"]);
        assert_eq!(c.planner.source, Source::Flag("--planner"));
        assert_eq!(c.cert_dir.value, PathBuf::from("/flag/certs"));
        assert_eq!(c.user.value, "flaguser");
        assert_eq!(c.user.source, Source::Flag("--user"));
    }

    #[test]
    fn env_beats_file() {
        let f = file(Some("file-host:2"), Some("/file/certs"), Some("fileuser"));
        let path = Path::new("/x/client.toml");
        let c = resolve(&ClientArgs::default(), &env_of(FULL_ENV), Some((path, &f))).unwrap();
        assert_eq!(c.planner.value, ["env-host:1"]);
        assert_eq!(c.planner.source, Source::Env(ENV_PLANNER));
        assert_eq!(c.cert_dir.value, PathBuf::from("/env/certs"));
        assert_eq!(c.user.value, "envuser");
    }

    #[test]
    fn file_beats_defaults_and_login_name() {
        let f = file(Some("file-host:2"), Some("/file/certs"), Some("fileuser"));
        let path = Path::new("/x/client.toml");
        let c = resolve(&ClientArgs::default(), &env_of(&[("USER", "login")]), Some((path, &f))).unwrap();
        assert_eq!(c.planner.value, ["file-host:2"]);
        assert_eq!(c.planner.source, Source::File(path.to_owned()));
        assert_eq!(c.cert_dir.value, PathBuf::from("/file/certs"));
        assert_eq!(c.user.value, "fileuser");
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        let c = resolve(&ClientArgs::default(), &env_of(&[("USER", "login")]), None).unwrap();
        assert_eq!(c.planner.value, [DEFAULT_PLANNER]);
        assert_eq!(c.planner.source, Source::Default);
        assert_eq!(c.cert_dir.value, PathBuf::from(DEFAULT_CERT_DIR));
        assert_eq!(c.user.value, "login");
        assert_eq!(c.user.source, Source::Env("USER"));
    }

    #[test]
    fn each_setting_resolves_on_its_own() {
        let f = file(None, Some("/file/certs"), None);
        let c = resolve(
            &flags(None, None, Some("flaguser")),
            &env_of(&[(ENV_PLANNER, "env-host:1")]),
            Some((Path::new("/c.toml"), &f)),
        )
        .unwrap();
        assert_eq!(c.planner.value, ["env-host:1"]);
        assert_eq!(c.cert_dir.value, PathBuf::from("/file/certs"));
        assert_eq!(c.user.value, "flaguser");
    }

    #[test]
    fn empty_values_count_as_unset() {
        let f = file(Some(""), None, None);
        let c = resolve(
            &flags(Some(""), None, None),
            &env_of(&[(ENV_PLANNER, ""), (ENV_USER, ""), ("USER", "login")]),
            Some((Path::new("/c.toml"), &f)),
        )
        .unwrap();
        assert_eq!(c.planner.source, Source::Default);
        assert_eq!(c.user.value, "login");
    }

    #[test]
    fn no_user_anywhere_is_an_error_saying_how() {
        let err = resolve(&ClientArgs::default(), &env_of(&[]), None).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("--user NAME") && msg.contains("HYPERPLAN_USER"), "{msg}");
    }

    #[test]
    fn user_names_that_are_not_file_names_are_refused() {
        let err = resolve(&flags(None, None, Some("../root")), &env_of(&[]), None).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("from --user") && msg.contains("invalid user name"),
            "{msg}"
        );
    }

    #[test]
    fn config_file_path_respects_xdg() {
        let p = config_file_path(&env_of(&[("XDG_CONFIG_HOME", "/xdg"), ("HOME", "/home/a")]));
        assert_eq!(p, Some(PathBuf::from("/xdg/hyperplan/client.toml")));
        let p = config_file_path(&env_of(&[("XDG_CONFIG_HOME", "relative"), ("HOME", "/home/a")]));
        assert_eq!(p, Some(PathBuf::from("/home/a/.config/hyperplan/client.toml")));
        let p = config_file_path(&env_of(&[("HOME", "/home/a")]));
        assert_eq!(p, Some(PathBuf::from("/home/a/.config/hyperplan/client.toml")));
        assert_eq!(config_file_path(&env_of(&[])), None);
    }

    #[test]
    fn file_parses_camel_case_keys_and_refuses_unknown_ones() {
        let path = Path::new("/c/client.toml");
        let c = parse_file(path, "planner = \"h:1\"\ncertDir = \"/d\"\nuser = \"bob\"\n").unwrap();
        assert_eq!(c, file(Some("h:1"), Some("/d"), Some("bob")));
        let err = parse_file(path, "cert_dir = \"/d\"\n").unwrap_err().to_string();
        assert!(err.starts_with("/c/client.toml: ") && err.contains("cert_dir"), "{err}");
        assert!(err.contains("keys: planner, certDir, user"), "{err}");
    }

    #[test]
    fn missing_file_is_fine_and_present_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.toml");
        assert_eq!(load_file(&path).unwrap(), None);
        std::fs::write(&path, "user = \"carol\"\n").unwrap();
        assert_eq!(load_file(&path).unwrap(), Some(file(None, None, Some("carol"))));
    }

    #[test]
    fn planner_lists_split_on_commas() {
        let flag = Source::Flag("--planner");
        assert_eq!(parse_planners("head01:7400", &flag).unwrap(), ["head01:7400"]);
        assert_eq!(parse_planners("head01", &flag).unwrap(), ["head01"]);
        assert_eq!(
            parse_planners("head01:7400,head02:7400 , [::1]:7401", &flag).unwrap(),
            ["head01:7400", "head02:7400", "[::1]:7401"]
        );
    }

    #[test]
    fn empty_entries_name_the_list_and_its_source() {
        let path = Path::new("/home/a/.config/hyperplan/client.toml");
        for (list, source, origin) in [
            ("a:1,,b:1", Source::Flag("--planner"), "from --planner"),
            ("a:1,", Source::Env(ENV_PLANNER), "from $HYPERPLAN_PLANNER"),
            (
                " , a:1",
                Source::File(path.to_owned()),
                "from /home/a/.config/hyperplan/client.toml",
            ),
        ] {
            let err = parse_planners(list, &source).unwrap_err().to_string();
            assert_eq!(
                err,
                format!(
                    "the planner address list {list:?} ({origin}) has an empty entry; expected HOST:PORT or a \
                     comma-separated list HOST:PORT,HOST:PORT"
                )
            );
        }
    }

    #[test]
    fn lists_resolve_from_every_source() {
        let f = file(Some("f1:7400, f2:7400"), None, None);
        let path = Path::new("/c.toml");
        let c = resolve(&ClientArgs::default(), &env_of(&[("USER", "u")]), Some((path, &f))).unwrap();
        assert_eq!(c.planner.value, ["f1:7400", "f2:7400"]);
        assert_eq!(c.planner.source, Source::File(path.to_owned()));
        let c = resolve(
            &ClientArgs::default(),
            &env_of(&[(ENV_PLANNER, "e1:1,e2:1"), ("USER", "u")]),
            None,
        )
        .unwrap();
        assert_eq!(c.planner.value, ["e1:1", "e2:1"]);
        let err = resolve(&flags(Some("a:1,,b:1"), None, None), &env_of(&[("USER", "u")]), None).unwrap_err();
        assert!(
            format!("{err:#}").contains("(from --planner) has an empty entry"),
            "{err:#}"
        );
    }
}
