//! The PMI-1 "simple" wire protocol, server side, without I/O: the lines an MPI rank
//! writes on its `PMI_FD` socket parsed into [`Request`]s, and the [`Response`] lines it
//! expects back. This is what MPICH's simple PMI client (Debian bookworm ships MPICH
//! 4.0.2, whose `libmpich.so.12` holds the formats `cmd=init pmi_version=%d
//! pmi_subversion=%d`, `cmd=put kvsname=%s key=%s value=%s`, …), Intel MPI and MVAPICH
//! speak to hydra's `pmi_proxy`, Slurm and Flux.
//!
//! Learnt from pmodels/mpich v4.0.2 — the client `src/pmi/simple/simple_pmi.c` and its
//! parser `src/pmi/simple/simple_pmiutil.c`; hydra's servers
//! `src/pm/hydra/pm/pmiserv/pmip_pmi_v1.c` and `pmiserv_pmi_v1.c` — with the later
//! client (`src/pmi/src/pmi_wire.c`, `pmi_v1.c`, `src/pmi/maint/pmi-1.1.txt`) for what
//! newer ranks send, and flux-core's `src/common/libpmi/simple_server.c` and
//! `keyval.c`.
//!
//! # The protocol
//!
//! One request, one response, each a line of `key=value` words separated by single
//! spaces and ended by `\n`, the first word `cmd=<name>`:
//!
//! ```text
//! C: cmd=init pmi_version=1 pmi_subversion=1
//! S: cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0
//! C: cmd=get_maxes
//! S: cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024
//! C: cmd=get_appnum                      S: cmd=appnum appnum=0
//! C: cmd=get_my_kvsname                  S: cmd=my_kvsname kvsname=kvs_7
//! C: cmd=get_universe_size               S: cmd=universe_size size=8
//! C: cmd=put kvsname=kvs_7 key=k value=v S: cmd=put_result rc=0
//! C: cmd=barrier_in                      S: cmd=barrier_out     (once all ranks are in)
//! C: cmd=get kvsname=kvs_7 key=k         S: cmd=get_result rc=0 value=v
//!                                        S: cmd=get_result rc=-1 msg=key_not_found
//! C: cmd=finalize                        S: cmd=finalize_ack    (the rank then closes)
//! C: cmd=abort exitcode=1                (no answer: the server ends the job)
//! ```
//!
//! The rank's size and rank come from `PMI_SIZE` and `PMI_RANK`, not the wire. A rank
//! given `PMI_PORT` and `PMI_ID` instead first sends `cmd=initack pmiid=<id>` and reads
//! four lines (`cmd=initack`, then `cmd=set size=`, `cmd=set rank=`, `cmd=set debug=`).
//!
//! How the client reads a line (`PMIU_parse_keyvals`): words split at spaces only; a
//! word's key ends at its first `=`, so a value may hold `=` but never a space or a
//! newline; a word without `=` fails the whole line; of duplicate keys the first wins
//! (hydra's and Flux's servers agree). A value is copied raw, with no escaping (clients
//! from MPICH 4.1 on treat `\` as an escape when reading). [`parse`] reads requests the
//! same way, the first of duplicate keys winning, except that the message of an `abort`
//! runs to the end of the line (newer clients send `message=<text with spaces>`).
//!
//! Lengths: the client writes at most `PMIU_MAXLINE` (1024) bytes, newline included
//! ([`MAX_LINE`]), and reads at most 1023 ([`MAX_RESPONSE_LINE`]): a longer response is
//! split and every later answer misread. Told `vallen_max=1024`, it shrinks its value
//! size to 1024 − kvsname_max − keylen_max − 30 so that a whole put fits a line, which
//! leaves values of [`CLIENT_VALUE_MAX`] bytes.
//!
//! Failure: the client checks `rc` only in `response_to_init` (non-zero: it aborts),
//! `put_result`, `get_result` and the publish, lookup and spawn results. For
//! `get_maxes`, `get_appnum`, `get_my_kvsname`, `get_universe_size`, `barrier_in` and
//! `finalize` it looks at the command name alone, so the way to fail one of those is to
//! close the socket: the rank's read sees end-of-file and its PMI call fails (hydra and
//! Flux do the same on a protocol error). [`Request::refusal`] and
//! [`WireError::refusal`] say which applies. An error's `msg=` is one word: spaces, `=`
//! and anything unprintable become `_` (hydra's `msg=key_x_not_found`).
//!
//! `publish_name`, `unpublish_name`, `lookup_name` and spawn are not served: each gets an
//! `rc=-1` result, so `MPI_Publish_name`, `MPI_Lookup_name` and `MPI_Comm_spawn` fail
//! instead of hanging. A spawn is the one multi-line request (`mcmd=spawn`, then
//! `nprocs=`, `execname=`, `totspawns=`, `spawnssofar=`, `argcnt=`, `arg1=`…,
//! `preput_num=`, `info_num=`… one per line, values free-form, ended by a line
//! `endcmd`), one such block per command of `MPI_Comm_spawn_multiple`; the client reads
//! a single `spawn_result` after the last block (`spawnssofar` = `totspawns`). A
//! connection's lines therefore go through a [`Decoder`], which swallows the blocks and
//! yields the spawn once.

/// The longest request line, its newline included (`PMIU_MAXLINE` in MPICH).
pub const MAX_LINE: usize = 1024;
/// The longest response line, its newline included: the client reads lines into a
/// `MAX_LINE` buffer, a NUL included.
pub const MAX_RESPONSE_LINE: usize = MAX_LINE - 1;
/// `kvsname_max` told to the client (hydra's `PMI_MAXKVSLEN`; the client's buffer for
/// its kvsname, NUL included).
pub const KVSNAME_MAX: usize = 256;
/// `keylen_max` told to the client (hydra's `PMI_MAXKEYLEN`).
pub const KEYLEN_MAX: usize = 64;
/// `vallen_max` told to the client (hydra's `PMI_MAXVALLEN`); it uses less, see
/// [`CLIENT_VALUE_MAX`].
pub const VALLEN_MAX: usize = 1024;
/// The longest value an MPICH 4.0.2 rank reads whole: it sizes its value buffers (NUL
/// included) to `MAX_LINE - kvsname_max - keylen_max - 30` and silently truncates a
/// longer value.
pub const CLIENT_VALUE_MAX: usize = MAX_LINE - KVSNAME_MAX - KEYLEN_MAX - 30 - 1;
/// The PMI version served (the client sends 1.1; MPICH 4.1 on takes a higher answer as
/// leave to use 1.2 extensions).
pub const PMI_VERSION: u32 = 1;
pub const PMI_SUBVERSION: u32 = 1;
/// The line that ends a block of a multi-line (`mcmd=`) request.
pub const ENDCMD: &str = "endcmd";

/// Why a line is not a request this server understands. Every variant naming a command
/// (`cmd`) is about a command it knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("line of {len} bytes with its newline, longer than the PMI limit of {MAX_LINE}")]
    LineTooLong { len: usize },
    #[error("line is not UTF-8")]
    NotUtf8,
    #[error("control byte {byte:#04x} at offset {offset}")]
    ControlByte { offset: usize, byte: u8 },
    #[error("empty line")]
    Empty,
    #[error("line does not start with cmd= (or mcmd=)")]
    NoCmd,
    #[error("unknown command {cmd:?}")]
    UnknownCommand { cmd: String },
    #[error("{cmd}: word {word:?} is not key=value")]
    BadWord { cmd: &'static str, word: String },
    #[error("{cmd}: missing field {field}")]
    MissingField { cmd: &'static str, field: &'static str },
    #[error("{cmd}: field {field} is empty")]
    EmptyField { cmd: &'static str, field: &'static str },
    #[error("{cmd}: field {field} is not a number: {value:?}")]
    BadNumber {
        cmd: &'static str,
        field: &'static str,
        value: String,
    },
    #[error("{cmd}: field {field} of {len} bytes, longer than {max}")]
    FieldTooLong {
        cmd: &'static str,
        field: &'static str,
        len: usize,
        max: usize,
    },
}

impl WireError {
    /// The answer that makes the rank's PMI call fail, for an error in a command whose
    /// result the client checks; `None`: close the connection instead (the line cannot
    /// be answered, or the client would take any answer for success or wait for more).
    pub fn refusal(&self) -> Option<Response> {
        let cmd = match self {
            WireError::BadWord { cmd, .. }
            | WireError::MissingField { cmd, .. }
            | WireError::EmptyField { cmd, .. }
            | WireError::BadNumber { cmd, .. }
            | WireError::FieldTooLong { cmd, .. } => cmd,
            _ => return None,
        };
        checked_reply(cmd).map(|reply| Response::error(reply, &self.to_string()))
    }
}

/// One request from a rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `cmd=init pmi_version=1 pmi_subversion=1`: answer with [`init_response`].
    Init { version: u32, subversion: u32 },
    /// `cmd=initack pmiid=<PMI_ID>` (ranks given `PMI_PORT`): [`Response::InitAck`].
    InitAck { pmiid: u32 },
    /// [`Response::Maxes`].
    GetMaxes,
    /// [`Response::Appnum`].
    GetAppnum,
    /// [`Response::MyKvsname`].
    GetMyKvsname,
    /// [`Response::UniverseSize`].
    GetUniverseSize,
    /// [`Response::PutOk`] or a refusal. `kvsname` is always sent by MPICH 4.0.2 and
    /// optional from 4.1 on.
    Put {
        kvsname: Option<String>,
        key: String,
        value: String,
    },
    /// [`Response::GetOk`] or [`Response::GetNotFound`].
    Get { kvsname: Option<String>, key: String },
    /// [`Response::BarrierOut`] once every rank of the job is in.
    BarrierIn,
    /// [`Response::FinalizeAck`]; the rank then closes its end.
    Finalize,
    /// `cmd=abort exitcode=<n>` (MPICH 4.1 on adds `message=<text>`): no answer; end the
    /// job. A missing or unreadable exit code reads as 1 (hydra's default): an abort is
    /// never refused. The 4.0.2 client then waits for a line or end-of-file.
    Abort { code: i32, message: Option<String> },
    /// A command served by refusal ([`Request::refusal`]): `publish_name`,
    /// `unpublish_name`, `lookup_name`, or `spawn` (from a [`Decoder`], after the last
    /// `endcmd`).
    Unsupported { cmd: String },
}

impl Request {
    /// The name of the response line the client waits for (`None` for an abort).
    pub fn reply_cmd(&self) -> Option<&'static str> {
        match self {
            Request::Init { .. } => Some("response_to_init"),
            Request::InitAck { .. } => Some("initack"),
            Request::GetMaxes => Some("maxes"),
            Request::GetAppnum => Some("appnum"),
            Request::GetMyKvsname => Some("my_kvsname"),
            Request::GetUniverseSize => Some("universe_size"),
            Request::Put { .. } => Some("put_result"),
            Request::Get { .. } => Some("get_result"),
            Request::BarrierIn => Some("barrier_out"),
            Request::Finalize => Some("finalize_ack"),
            Request::Abort { .. } => None,
            Request::Unsupported { cmd } => reply_of(cmd),
        }
    }

    /// The `rc=-1` answer that makes this request's PMI call fail, where the client
    /// checks `rc` (init, put, get, publish, unpublish, lookup, spawn); `None` where it
    /// does not (or waits for more lines, or expects no answer): close the connection.
    pub fn refusal(&self, msg: &str) -> Option<Response> {
        let reply = self.reply_cmd()?;
        checked_reply(request_of(reply)?).map(|reply| Response::error(reply, msg))
    }
}

/// The answer to `cmd=init`: this server speaks 1.1 to any 1.x client.
pub fn init_response(version: u32, _subversion: u32) -> Response {
    if version == PMI_VERSION {
        Response::InitOk
    } else {
        Response::error(
            "response_to_init",
            &format!("PMI version {version} is not served, only {PMI_VERSION}"),
        )
    }
}

/// One answer to a rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0`
    InitOk,
    /// `cmd=initack` and three `cmd=set` lines (size, rank, debug).
    InitAck { size: u32, rank: u32, debug: u32 },
    /// `cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024`
    Maxes,
    /// `cmd=appnum appnum=<n>`
    Appnum { appnum: u32 },
    /// `cmd=my_kvsname kvsname=<name>` (a name that is not [`is_wire_value`], or longer
    /// than `KVSNAME_MAX - 1`, is sent as an error).
    MyKvsname { kvsname: String },
    /// `cmd=universe_size size=<n>`
    UniverseSize { size: u32 },
    /// `cmd=put_result rc=0`
    PutOk,
    /// `cmd=get_result rc=0 value=<v>`; a value the line cannot carry (not
    /// [`is_wire_value`], or too long for [`MAX_RESPONSE_LINE`]) is sent as an error.
    GetOk { value: String },
    /// `cmd=get_result rc=-1 msg=key_not_found`
    GetNotFound,
    /// `cmd=barrier_out`
    BarrierOut,
    /// `cmd=finalize_ack`
    FinalizeAck,
    /// `cmd=<reply> rc=-1 msg=<one word>`: build with [`Response::error`].
    Error { reply: &'static str, msg: String },
}

impl Response {
    /// An error answer to the request whose reply is `reply`; `msg` is made one word (see
    /// [`error_word`]).
    pub fn error(reply: &'static str, msg: &str) -> Response {
        Response::Error {
            reply,
            msg: error_word(msg),
        }
    }

    /// The bytes to write: one line (four for `InitAck`) ending in `\n`, each at most
    /// [`MAX_RESPONSE_LINE`] bytes.
    pub fn encode(&self) -> String {
        match self {
            Response::InitOk => {
                format!("cmd=response_to_init pmi_version={PMI_VERSION} pmi_subversion={PMI_SUBVERSION} rc=0\n")
            }
            Response::InitAck { size, rank, debug } => {
                format!("cmd=initack\ncmd=set size={size}\ncmd=set rank={rank}\ncmd=set debug={debug}\n")
            }
            Response::Maxes => {
                format!("cmd=maxes kvsname_max={KVSNAME_MAX} keylen_max={KEYLEN_MAX} vallen_max={VALLEN_MAX}\n")
            }
            Response::Appnum { appnum } => format!("cmd=appnum appnum={appnum}\n"),
            Response::MyKvsname { kvsname } => {
                if is_wire_value(kvsname) && !kvsname.is_empty() && kvsname.len() < KVSNAME_MAX {
                    format!("cmd=my_kvsname kvsname={kvsname}\n")
                } else {
                    encode_error("my_kvsname", "kvsname_not_representable")
                }
            }
            Response::UniverseSize { size } => format!("cmd=universe_size size={size}\n"),
            Response::PutOk => "cmd=put_result rc=0\n".to_string(),
            Response::GetOk { value } => {
                let line = format!("cmd=get_result rc=0 value={value}\n");
                if is_wire_value(value) && line.len() <= MAX_RESPONSE_LINE {
                    line
                } else {
                    encode_error("get_result", "value_not_representable")
                }
            }
            Response::GetNotFound => encode_error("get_result", "key_not_found"),
            Response::BarrierOut => "cmd=barrier_out\n".to_string(),
            Response::FinalizeAck => "cmd=finalize_ack\n".to_string(),
            Response::Error { reply, msg } => encode_error(reply, msg),
        }
    }
}

/// Whether `s` can be a value on the wire: no space (the word would end), nothing below
/// 0x20 or DEL (a newline would end the line), no `\` (newer clients unescape it).
pub fn is_wire_value(s: &str) -> bool {
    !s.chars().any(|c| c == ' ' || c == '\\' || c.is_control())
}

/// `msg` as one word for `msg=`: printable ASCII but for space, `=` and `\`, each other
/// character `_`; `error` when empty; cut to leave a response line room.
pub fn error_word(msg: &str) -> String {
    let mut word: String = msg
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '=' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_ERROR_WORD)
        .collect();
    if word.is_empty() {
        word.push_str("error");
    }
    word
}

/// Room for `msg=` in `cmd=<longest reply> rc=-1 msg=…\n`.
const MAX_ERROR_WORD: usize = 512;

fn encode_error(reply: &str, msg: &str) -> String {
    format!("cmd={reply} rc=-1 msg={}\n", error_word(msg))
}

/// The response name for a request name.
fn reply_of(cmd: &str) -> Option<&'static str> {
    Some(match cmd {
        "init" => "response_to_init",
        "initack" => "initack",
        "get_maxes" => "maxes",
        "get_appnum" => "appnum",
        "get_my_kvsname" => "my_kvsname",
        "get_universe_size" => "universe_size",
        "put" => "put_result",
        "get" => "get_result",
        "barrier_in" => "barrier_out",
        "finalize" => "finalize_ack",
        "publish_name" => "publish_result",
        "unpublish_name" => "unpublish_result",
        "lookup_name" => "lookup_result",
        "spawn" => "spawn_result",
        _ => return None,
    })
}

/// The request name for a response name (the inverse of [`reply_of`]).
fn request_of(reply: &str) -> Option<&'static str> {
    Some(match reply {
        "response_to_init" => "init",
        "initack" => "initack",
        "maxes" => "get_maxes",
        "appnum" => "get_appnum",
        "my_kvsname" => "get_my_kvsname",
        "universe_size" => "get_universe_size",
        "put_result" => "put",
        "get_result" => "get",
        "barrier_out" => "barrier_in",
        "finalize_ack" => "finalize",
        "publish_result" => "publish_name",
        "unpublish_result" => "unpublish_name",
        "lookup_result" => "lookup_name",
        "spawn_result" => "spawn",
        _ => return None,
    })
}

/// The reply to `cmd` when MPICH 4.0.2's client checks its `rc` (`GetResponse` with
/// `checkRc`, or an explicit look at `rc`).
fn checked_reply(cmd: &str) -> Option<&'static str> {
    match cmd {
        "init" | "put" | "get" | "publish_name" | "unpublish_name" | "lookup_name" | "spawn" => reply_of(cmd),
        _ => None,
    }
}

/// The text of one line: without its `\n`, within [`MAX_LINE`], UTF-8, no control bytes.
fn line_text(line: &[u8]) -> Result<&str, WireError> {
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    if body.len() >= MAX_LINE {
        return Err(WireError::LineTooLong { len: body.len() + 1 });
    }
    if let Some((offset, &byte)) = body.iter().enumerate().find(|&(_, &b)| b < 0x20 || b == 0x7f) {
        return Err(WireError::ControlByte { offset, byte });
    }
    std::str::from_utf8(body).map_err(|_| WireError::NotUtf8)
}

/// One line, parsed: a request, or the first line of a multi-line one.
enum Parsed {
    Request(Request),
    /// `mcmd=spawn`: the lines up to the last `endcmd` follow.
    SpawnStart,
}

/// Parses one request line, with or without its `\n`. Never panics, on any bytes.
///
/// `mcmd=spawn` reads as `Unsupported { cmd: "spawn" }`, but it opens a multi-line
/// request to be answered only after its last `endcmd`: a connection's lines go through
/// a [`Decoder`], which handles that.
pub fn parse(line: &[u8]) -> Result<Request, WireError> {
    match parse_line(line)? {
        Parsed::Request(r) => Ok(r),
        Parsed::SpawnStart => Ok(Request::Unsupported {
            cmd: "spawn".to_string(),
        }),
    }
}

fn parse_line(line: &[u8]) -> Result<Parsed, WireError> {
    let text = line_text(line)?;
    if text.is_empty() {
        return Err(WireError::Empty);
    }
    if let Some(mcmd) = text.strip_prefix("mcmd=") {
        return if mcmd == "spawn" {
            Ok(Parsed::SpawnStart)
        } else {
            Err(WireError::UnknownCommand {
                cmd: format!("mcmd={mcmd}"),
            })
        };
    }
    let Some(rest) = text.strip_prefix("cmd=") else {
        return Err(WireError::NoCmd);
    };
    let name = rest.split(' ').next().unwrap_or_default();
    let cmd: &'static str = match name {
        "init" => "init",
        "initack" => "initack",
        "get_maxes" => "get_maxes",
        "get_appnum" => "get_appnum",
        "get_my_kvsname" => "get_my_kvsname",
        "get_universe_size" => "get_universe_size",
        "put" => "put",
        "get" => "get",
        "barrier_in" => "barrier_in",
        "finalize" => "finalize",
        "abort" => "abort",
        "publish_name" | "unpublish_name" | "lookup_name" => {
            return Ok(Parsed::Request(Request::Unsupported { cmd: name.to_string() }));
        }
        _ => return Err(WireError::UnknownCommand { cmd: name.to_string() }),
    };
    if cmd == "abort" {
        return Ok(Parsed::Request(parse_abort(text)));
    }
    let fields = Fields::split(cmd, text)?;
    let request = match cmd {
        "init" => Request::Init {
            version: fields.number("pmi_version")?,
            subversion: fields.number("pmi_subversion")?,
        },
        "initack" => Request::InitAck {
            pmiid: fields.number("pmiid")?,
        },
        "get_maxes" => Request::GetMaxes,
        "get_appnum" => Request::GetAppnum,
        "get_my_kvsname" => Request::GetMyKvsname,
        "get_universe_size" => Request::GetUniverseSize,
        "put" => Request::Put {
            kvsname: fields.kvsname()?,
            key: fields.key()?,
            value: fields.bounded("value", VALLEN_MAX)?.to_string(),
        },
        "get" => Request::Get {
            kvsname: fields.kvsname()?,
            key: fields.key()?,
        },
        "barrier_in" => Request::BarrierIn,
        _ => Request::Finalize,
    };
    Ok(Parsed::Request(request))
}

/// `cmd=abort exitcode=<n> [message=<rest of the line>]`, read leniently.
fn parse_abort(text: &str) -> Request {
    let (head, message) = match text.split_once(" message=") {
        Some((head, message)) => (head, (!message.is_empty()).then(|| message.to_string())),
        None => (text, None),
    };
    let code = head
        .split(' ')
        .find_map(|w| w.strip_prefix("exitcode="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    Request::Abort { code, message }
}

/// A request line's `key=value` words after `cmd=`, in order.
struct Fields<'a> {
    cmd: &'static str,
    words: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn split(cmd: &'static str, text: &'a str) -> Result<Fields<'a>, WireError> {
        let mut words = Vec::new();
        // The first word is `cmd=<name>`.
        for word in text.split(' ').skip(1).filter(|w| !w.is_empty()) {
            match word.split_once('=') {
                Some((key, value)) if !key.is_empty() => words.push((key, value)),
                _ => {
                    return Err(WireError::BadWord {
                        cmd,
                        word: word.to_string(),
                    });
                }
            }
        }
        Ok(Fields { cmd, words })
    }

    /// The first `field=`'s value, as the client and hydra read duplicates.
    fn get(&self, field: &str) -> Option<&'a str> {
        self.words.iter().find(|(k, _)| *k == field).map(|&(_, v)| v)
    }

    fn required(&self, field: &'static str) -> Result<&'a str, WireError> {
        self.get(field).ok_or(WireError::MissingField { cmd: self.cmd, field })
    }

    fn bounded(&self, field: &'static str, max: usize) -> Result<&'a str, WireError> {
        let value = self.required(field)?;
        if value.len() > max {
            return Err(WireError::FieldTooLong {
                cmd: self.cmd,
                field,
                len: value.len(),
                max,
            });
        }
        Ok(value)
    }

    fn number(&self, field: &'static str) -> Result<u32, WireError> {
        let value = self.required(field)?;
        value.parse().map_err(|_| WireError::BadNumber {
            cmd: self.cmd,
            field,
            value: value.to_string(),
        })
    }

    fn key(&self) -> Result<String, WireError> {
        let key = self.bounded("key", KEYLEN_MAX)?;
        if key.is_empty() {
            return Err(WireError::EmptyField {
                cmd: self.cmd,
                field: "key",
            });
        }
        Ok(key.to_string())
    }

    fn kvsname(&self) -> Result<Option<String>, WireError> {
        match self.get("kvsname") {
            None => Ok(None),
            Some("") => Err(WireError::EmptyField {
                cmd: self.cmd,
                field: "kvsname",
            }),
            Some(_) => Ok(Some(self.bounded("kvsname", KVSNAME_MAX)?.to_string())),
        }
    }
}

/// A connection's request lines in order, multi-line spawns included: feed it each line
/// (as read, at most [`MAX_LINE`] bytes up to and including `\n`).
#[derive(Debug, Default)]
pub struct Decoder {
    spawn: Option<Spawn>,
}

/// A spawn being read: the counters of the block in progress.
#[derive(Debug, Default)]
struct Spawn {
    totspawns: Option<u32>,
    spawnssofar: Option<u32>,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Whether a multi-line request is being read (its lines get no answer).
    pub fn in_multiline(&self) -> bool {
        self.spawn.is_some()
    }

    /// The request `line` completes, if any: `Ok(None)` for a line inside a spawn (the
    /// spawn comes as `Unsupported { cmd: "spawn" }` at the `endcmd` of its last block).
    /// An error is a line this server cannot answer; see [`WireError::refusal`].
    pub fn feed(&mut self, line: &[u8]) -> Result<Option<Request>, WireError> {
        let Some(spawn) = &mut self.spawn else {
            return match parse_line(line)? {
                Parsed::Request(r) => Ok(Some(r)),
                Parsed::SpawnStart => {
                    self.spawn = Some(Spawn::default());
                    Ok(None)
                }
            };
        };
        // Inside a block every line is `key=<anything>`, a new block's `mcmd=spawn`, or
        // `endcmd`.
        let text = line_text(line)?;
        if text == ENDCMD {
            let last = match (spawn.totspawns, spawn.spawnssofar) {
                (Some(total), Some(so_far)) => so_far >= total,
                _ => true,
            };
            if last {
                self.spawn = None;
                return Ok(Some(Request::Unsupported {
                    cmd: "spawn".to_string(),
                }));
            }
            spawn.spawnssofar = None;
        } else if let Some((key, value)) = text.split_once('=') {
            match key {
                "totspawns" => spawn.totspawns = value.parse().ok(),
                "spawnssofar" => spawn.spawnssofar = value.parse().ok(),
                _ => {}
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ok(line: &str) -> Request {
        parse(line.as_bytes()).unwrap()
    }

    fn err(line: &[u8]) -> WireError {
        parse(line).unwrap_err()
    }

    #[test]
    fn every_command_parses() {
        assert_eq!(
            ok("cmd=init pmi_version=1 pmi_subversion=1\n"),
            Request::Init {
                version: 1,
                subversion: 1
            }
        );
        assert_eq!(ok("cmd=initack pmiid=3\n"), Request::InitAck { pmiid: 3 });
        assert_eq!(ok("cmd=get_maxes\n"), Request::GetMaxes);
        assert_eq!(ok("cmd=get_appnum\n"), Request::GetAppnum);
        assert_eq!(ok("cmd=get_my_kvsname\n"), Request::GetMyKvsname);
        assert_eq!(ok("cmd=get_universe_size\n"), Request::GetUniverseSize);
        assert_eq!(
            ok("cmd=put kvsname=kvs_7 key=hostname[0] value=node-a\n"),
            Request::Put {
                kvsname: Some("kvs_7".into()),
                key: "hostname[0]".into(),
                value: "node-a".into()
            }
        );
        assert_eq!(
            ok("cmd=get kvsname=kvs_7 key=PMI_process_mapping\n"),
            Request::Get {
                kvsname: Some("kvs_7".into()),
                key: "PMI_process_mapping".into()
            }
        );
        assert_eq!(ok("cmd=barrier_in\n"), Request::BarrierIn);
        assert_eq!(ok("cmd=finalize\n"), Request::Finalize);
        assert_eq!(
            ok("cmd=abort exitcode=-1\n"),
            Request::Abort {
                code: -1,
                message: None
            }
        );
        for cmd in [
            "publish_name service=s port=p",
            "unpublish_name service=s",
            "lookup_name service=s",
        ] {
            let name = cmd.split(' ').next().unwrap();
            assert_eq!(ok(&format!("cmd={cmd}\n")), Request::Unsupported { cmd: name.into() });
        }
        assert_eq!(ok("mcmd=spawn\n"), Request::Unsupported { cmd: "spawn".into() });
        // Without the newline, and the later client's put without a kvsname.
        assert_eq!(ok("cmd=barrier_in"), Request::BarrierIn);
        assert_eq!(
            ok("cmd=put key=k value=v"),
            Request::Put {
                kvsname: None,
                key: "k".into(),
                value: "v".into()
            }
        );
    }

    #[test]
    fn responses_encode_exactly() {
        let cases = [
            (
                Response::InitOk,
                "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
            ),
            (
                Response::InitAck {
                    size: 4,
                    rank: 2,
                    debug: 0,
                },
                "cmd=initack\ncmd=set size=4\ncmd=set rank=2\ncmd=set debug=0\n",
            ),
            (
                Response::Maxes,
                "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
            ),
            (Response::Appnum { appnum: 0 }, "cmd=appnum appnum=0\n"),
            (
                Response::MyKvsname {
                    kvsname: "hyperplan_7".into(),
                },
                "cmd=my_kvsname kvsname=hyperplan_7\n",
            ),
            (Response::UniverseSize { size: 8 }, "cmd=universe_size size=8\n"),
            (Response::PutOk, "cmd=put_result rc=0\n"),
            (
                Response::GetOk {
                    value: "(vector,(0,2,4))".into(),
                },
                "cmd=get_result rc=0 value=(vector,(0,2,4))\n",
            ),
            (Response::GetOk { value: String::new() }, "cmd=get_result rc=0 value=\n"),
            (Response::GetNotFound, "cmd=get_result rc=-1 msg=key_not_found\n"),
            (Response::BarrierOut, "cmd=barrier_out\n"),
            (Response::FinalizeAck, "cmd=finalize_ack\n"),
            (
                Response::error("put_result", "the job's key-value space is full (64 MiB)\n"),
                "cmd=put_result rc=-1 msg=the_job's_key-value_space_is_full_(64_MiB)_\n",
            ),
            (
                Response::error("spawn_result", "a=b\\c"),
                "cmd=spawn_result rc=-1 msg=a_b_c\n",
            ),
            (
                Response::error("lookup_result", ""),
                "cmd=lookup_result rc=-1 msg=error\n",
            ),
        ];
        for (response, line) in cases {
            assert_eq!(response.encode(), line, "{response:?}");
        }
    }

    #[test]
    fn init_answers_any_1x_with_1_1() {
        assert_eq!(init_response(1, 1), Response::InitOk);
        assert_eq!(init_response(1, 2), Response::InitOk);
        assert_eq!(
            init_response(2, 0).encode(),
            "cmd=response_to_init rc=-1 msg=PMI_version_2_is_not_served,_only_1\n"
        );
    }

    #[test]
    fn responses_never_break_a_line() {
        // The longest value that fits a 1023-byte line goes out; one more is an error.
        let room = MAX_RESPONSE_LINE - "cmd=get_result rc=0 value=\n".len();
        let fits = Response::GetOk {
            value: "v".repeat(room),
        }
        .encode();
        assert_eq!(fits.len(), MAX_RESPONSE_LINE);
        assert_eq!(
            Response::GetOk {
                value: "v".repeat(room + 1)
            }
            .encode(),
            "cmd=get_result rc=-1 msg=value_not_representable\n"
        );
        for bad in ["a b", "a\nb", "a\\b", "a\0b"] {
            let line = Response::GetOk { value: bad.into() }.encode();
            assert_eq!(line, "cmd=get_result rc=-1 msg=value_not_representable\n");
            let line = Response::MyKvsname { kvsname: bad.into() }.encode();
            assert_eq!(line, "cmd=my_kvsname rc=-1 msg=kvsname_not_representable\n");
        }
        let long = Response::error("get_result", &"x ".repeat(4000)).encode();
        assert!(long.len() <= MAX_RESPONSE_LINE && long.ends_with('\n'));
        assert_eq!(long.matches('\n').count(), 1);
        assert_eq!(long.matches(' ').count(), 2);
    }

    #[test]
    fn values_keep_their_equals_signs() {
        // ch3's business card, and a value made of `=`.
        let card = "description#node-a$port#40123$ifname#10.0.0.1$";
        assert_eq!(
            ok(&format!("cmd=put kvsname=kvs_7 key=P0-businesscard value={card}\n")),
            Request::Put {
                kvsname: Some("kvs_7".into()),
                key: "P0-businesscard".into(),
                value: card.into()
            }
        );
        assert_eq!(
            ok("cmd=put kvsname=k key=x value=a=b==c=\n"),
            Request::Put {
                kvsname: Some("k".into()),
                key: "x".into(),
                value: "a=b==c=".into()
            }
        );
        assert_eq!(
            ok("cmd=put kvsname=k key=x value=\n"),
            Request::Put {
                kvsname: Some("k".into()),
                key: "x".into(),
                value: String::new()
            }
        );
        let line = Response::GetOk {
            value: "a=b==c=".into(),
        }
        .encode();
        assert_eq!(line, "cmd=get_result rc=0 value=a=b==c=\n");
    }

    #[test]
    fn the_first_of_duplicate_keys_wins() {
        assert_eq!(
            ok("cmd=put kvsname=a key=k1 value=v1 key=k2 value=v2 kvsname=b\n"),
            Request::Put {
                kvsname: Some("a".into()),
                key: "k1".into(),
                value: "v1".into()
            }
        );
        assert_eq!(
            ok("cmd=init pmi_version=1 pmi_subversion=1 pmi_version=2\n"),
            Request::Init {
                version: 1,
                subversion: 1
            }
        );
        // Unknown fields and extra spaces are ignored, as hydra does.
        assert_eq!(ok("cmd=get_maxes  thrid=0x1 \n"), Request::GetMaxes);
        assert_eq!(
            ok("cmd=get  key=k   kvsname=s\n"),
            Request::Get {
                kvsname: Some("s".into()),
                key: "k".into()
            }
        );
    }

    #[test]
    fn abort_messages_run_to_the_end_of_the_line() {
        assert_eq!(
            ok("cmd=abort exitcode=3 message=Fatal error in MPI_Init: a=b\n"),
            Request::Abort {
                code: 3,
                message: Some("Fatal error in MPI_Init: a=b".into())
            }
        );
        assert_eq!(ok("cmd=abort\n"), Request::Abort { code: 1, message: None });
        assert_eq!(
            ok("cmd=abort exitcode=x message=\n"),
            Request::Abort { code: 1, message: None }
        );
        assert_eq!(Request::Abort { code: 1, message: None }.reply_cmd(), None);
        assert_eq!(Request::Abort { code: 1, message: None }.refusal("x"), None);
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(err(b""), WireError::Empty);
        assert_eq!(err(b"\n"), WireError::Empty);
        assert_eq!(err(b"hello\n"), WireError::NoCmd);
        assert_eq!(err(b" cmd=get_maxes\n"), WireError::NoCmd);
        assert_eq!(err(b"key=k cmd=get\n"), WireError::NoCmd);
        assert_eq!(err(b"cmd=\n"), WireError::UnknownCommand { cmd: String::new() });
        assert_eq!(
            err(b"cmd=singinit pmi_version=1\n"),
            WireError::UnknownCommand { cmd: "singinit".into() }
        );
        assert_eq!(err(b"mcmd=run\n"), WireError::UnknownCommand { cmd: "mcmd=run".into() });
        assert_eq!(err(b"cmd=put\xff key=k\n"), WireError::NotUtf8);
        assert_eq!(
            err(b"cmd=get key=k\r\n"),
            WireError::ControlByte {
                offset: 13,
                byte: b'\r'
            }
        );
        assert_eq!(
            err(b"cmd=get key=k\n\n"),
            WireError::ControlByte {
                offset: 13,
                byte: b'\n'
            }
        );
        assert_eq!(err(b"cmd=get\0 key=k\n"), WireError::ControlByte { offset: 7, byte: 0 });
        assert_eq!(
            err(b"cmd=put kvsname=k key=x value=a b\n"),
            WireError::BadWord {
                cmd: "put",
                word: "b".into()
            }
        );
        assert_eq!(
            err(b"cmd=get =x key=k\n"),
            WireError::BadWord {
                cmd: "get",
                word: "=x".into()
            }
        );
    }

    #[test]
    fn missing_and_bad_fields_are_named() {
        assert_eq!(
            err(b"cmd=init pmi_version=1\n"),
            WireError::MissingField {
                cmd: "init",
                field: "pmi_subversion"
            }
        );
        assert_eq!(
            err(b"cmd=init pmi_version=one pmi_subversion=1\n"),
            WireError::BadNumber {
                cmd: "init",
                field: "pmi_version",
                value: "one".into()
            }
        );
        assert_eq!(
            err(b"cmd=init pmi_version=-1 pmi_subversion=1\n"),
            WireError::BadNumber {
                cmd: "init",
                field: "pmi_version",
                value: "-1".into()
            }
        );
        assert_eq!(
            err(b"cmd=initack\n"),
            WireError::MissingField {
                cmd: "initack",
                field: "pmiid"
            }
        );
        assert_eq!(
            err(b"cmd=put kvsname=k value=v\n"),
            WireError::MissingField {
                cmd: "put",
                field: "key"
            }
        );
        assert_eq!(
            err(b"cmd=put kvsname=k key=x\n"),
            WireError::MissingField {
                cmd: "put",
                field: "value"
            }
        );
        assert_eq!(
            err(b"cmd=get kvsname=k\n"),
            WireError::MissingField {
                cmd: "get",
                field: "key"
            }
        );
        assert_eq!(
            err(b"cmd=get kvsname=k key=\n"),
            WireError::EmptyField {
                cmd: "get",
                field: "key"
            }
        );
        assert_eq!(
            err(b"cmd=get kvsname= key=k\n"),
            WireError::EmptyField {
                cmd: "get",
                field: "kvsname"
            }
        );
        let key = "k".repeat(KEYLEN_MAX + 1);
        assert_eq!(
            err(format!("cmd=get key={key}\n").as_bytes()),
            WireError::FieldTooLong {
                cmd: "get",
                field: "key",
                len: KEYLEN_MAX + 1,
                max: KEYLEN_MAX
            }
        );
        let name = "n".repeat(KVSNAME_MAX + 1);
        assert!(matches!(
            err(format!("cmd=get kvsname={name} key=k\n").as_bytes()),
            WireError::FieldTooLong { field: "kvsname", .. }
        ));
    }

    #[test]
    fn line_length_is_the_clients() {
        // MPICH 4.0.2 writes at most 1023 bytes; a full 1024-byte line is still taken.
        let head = format!(
            "cmd=put kvsname={} key={} value=",
            "n".repeat(200),
            "k".repeat(KEYLEN_MAX)
        );
        let value = "v".repeat(MAX_LINE - 1 - head.len());
        let line = format!("{head}{value}\n");
        assert_eq!(line.len(), MAX_LINE);
        assert!(matches!(parse(line.as_bytes()), Ok(Request::Put { .. })));
        assert!(matches!(parse(line.trim_end().as_bytes()), Ok(Request::Put { .. })));
        let long = format!("{head}{value}v\n");
        assert_eq!(err(long.as_bytes()), WireError::LineTooLong { len: MAX_LINE + 1 });
        assert_eq!(err(&[b'x'; 5000]), WireError::LineTooLong { len: 5001 });
        assert_eq!(CLIENT_VALUE_MAX, 673);
    }

    #[test]
    fn refusals_are_sent_only_where_the_client_checks_rc() {
        let put = Request::Put {
            kvsname: None,
            key: "k".into(),
            value: "v".into(),
        };
        assert_eq!(
            put.refusal("space full").unwrap().encode(),
            "cmd=put_result rc=-1 msg=space_full\n"
        );
        let get = Request::Get {
            kvsname: None,
            key: "k".into(),
        };
        assert_eq!(get.refusal("gone").unwrap().encode(), "cmd=get_result rc=-1 msg=gone\n");
        let init = Request::Init {
            version: 1,
            subversion: 1,
        };
        assert_eq!(
            init.refusal("no").unwrap().encode(),
            "cmd=response_to_init rc=-1 msg=no\n"
        );
        for (cmd, reply) in [
            ("publish_name", "publish_result"),
            ("unpublish_name", "unpublish_result"),
            ("lookup_name", "lookup_result"),
            ("spawn", "spawn_result"),
        ] {
            let request = Request::Unsupported { cmd: cmd.into() };
            assert_eq!(request.reply_cmd(), Some(reply));
            assert_eq!(
                request.refusal("not supported").unwrap().encode(),
                format!("cmd={reply} rc=-1 msg=not_supported\n")
            );
        }
        for request in [
            Request::InitAck { pmiid: 0 },
            Request::GetMaxes,
            Request::GetAppnum,
            Request::GetMyKvsname,
            Request::GetUniverseSize,
            Request::BarrierIn,
            Request::Finalize,
            Request::Unsupported { cmd: "other".into() },
        ] {
            assert_eq!(request.refusal("x"), None, "{request:?}");
        }
        // Errors in lines: answered for checked commands, else the connection closes.
        assert_eq!(
            err(b"cmd=put kvsname=k value=v\n").refusal().unwrap().encode(),
            "cmd=put_result rc=-1 msg=put:_missing_field_key\n"
        );
        assert_eq!(
            err(b"cmd=init pmi_version=x pmi_subversion=1\n")
                .refusal()
                .unwrap()
                .encode(),
            "cmd=response_to_init rc=-1 msg=init:_field_pmi_version_is_not_a_number:_\"x\"\n"
        );
        assert_eq!(err(b"cmd=initack pmiid=x\n").refusal(), None);
        assert_eq!(err(b"cmd=nope\n").refusal(), None);
        assert_eq!(err(b"garbage\n").refusal(), None);
    }

    #[test]
    fn a_decoder_answers_a_spawn_after_its_last_block() {
        // What MPICH 4.0.2's PMI_Spawn_multiple writes for two commands, one with an
        // argument holding spaces and `=`.
        let lines = [
            "mcmd=spawn",
            "nprocs=2",
            "execname=./worker",
            "totspawns=2",
            "spawnssofar=1",
            "arg1=--opt a=b c",
            "argcnt=1",
            "preput_num=1",
            "preput_key_0=PARENT_ROOT_PORT_NAME",
            "preput_val_0=tag#0$description#node-a$port#1$",
            "info_num=0",
            "endcmd",
            "mcmd=spawn",
            "nprocs=1",
            "execname=./other",
            "totspawns=2",
            "spawnssofar=2",
            "argcnt=0",
            "preput_num=0",
            "info_num=0",
            "endcmd",
        ];
        let mut d = Decoder::new();
        for line in &lines[..lines.len() - 1] {
            assert_eq!(d.feed(format!("{line}\n").as_bytes()), Ok(None), "{line}");
            assert!(d.in_multiline());
        }
        assert_eq!(
            d.feed(b"endcmd\n"),
            Ok(Some(Request::Unsupported { cmd: "spawn".into() }))
        );
        assert!(!d.in_multiline());
        assert_eq!(d.feed(b"cmd=barrier_in\n"), Ok(Some(Request::BarrierIn)));
        // A single block without counters ends at its endcmd.
        assert_eq!(d.feed(b"mcmd=spawn\n"), Ok(None));
        assert_eq!(d.feed(b"execname=x\n"), Ok(None));
        assert_eq!(
            d.feed(b"endcmd"),
            Ok(Some(Request::Unsupported { cmd: "spawn".into() }))
        );
        // Outside a spawn, the decoder parses as `parse` does.
        assert_eq!(d.feed(b"endcmd\n"), Err(WireError::NoCmd));
        assert_eq!(d.feed(b"cmd=get_maxes\n"), Ok(Some(Request::GetMaxes)));
    }

    /// `parse` and the decoder never panic: random bytes, and valid lines mutated.
    #[test]
    fn no_bytes_panic() {
        let valid: &[&[u8]] = &[
            b"cmd=init pmi_version=1 pmi_subversion=1\n",
            b"cmd=put kvsname=kvs_7 key=k value=a=b\n",
            b"cmd=get kvsname=kvs_7 key=k\n",
            b"cmd=abort exitcode=2 message=x y\n",
            b"mcmd=spawn\n",
            b"endcmd\n",
            b"totspawns=2\n",
        ];
        let alphabet = b"cmd= mcmd=spawn endcmd\n\0\xff\xc3\xa9key=value kvsname=exitcode=message=-1 ";
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9);
        let mut decoder = Decoder::new();
        for _ in 0..20_000 {
            let line: Vec<u8> = match rng.u8(0..3) {
                0 => (0..rng.usize(0..64)).map(|_| rng.u8(..)).collect(),
                1 => (0..rng.usize(0..80))
                    .map(|_| alphabet[rng.usize(0..alphabet.len())])
                    .collect(),
                _ => {
                    let mut l = valid[rng.usize(0..valid.len())].to_vec();
                    for _ in 0..rng.usize(0..4) {
                        let at = rng.usize(0..=l.len());
                        match rng.u8(0..3) {
                            0 if at < l.len() => {
                                l.remove(at);
                            }
                            1 if at < l.len() => l[at] = rng.u8(..),
                            _ => l.insert(at, alphabet[rng.usize(0..alphabet.len())]),
                        }
                    }
                    l
                }
            };
            if let Ok(request) = parse(&line) {
                let _ = request.refusal("x").map(|r| r.encode());
            }
            if let Err(e) = decoder.feed(&line) {
                let _ = e.refusal().map(|r| r.encode());
            }
        }
        let huge = vec![b'='; 1 << 20];
        assert!(parse(&huge).is_err());
    }
}
