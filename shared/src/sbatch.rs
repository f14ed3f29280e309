//! Batch scripts with `#SBATCH` lines (and `#HP`, hyperplan's spelling of the same
//! options): the directives read the way `sbatch` reads them, and the `launch: batch` job
//! they describe.
//!
//! Directives are the `#SBATCH`/`#HP` lines before the first command (blank lines and
//! other comments may come between them); each line's options are split into words as a
//! shell would (quotes, backslashes, a `#` word ends the line), in long and short forms
//! (`-N 2`, `-N2`, `--nodes=2`, `--nodes 2`). The last value of an option wins, and the
//! command line's options come after the script's. An option the job model cannot carry
//! yet (`--exclusive`) is read, then refused naming its line;
//! an option no one knows is an error, or with `--ignore-unknown` a warning, never
//! silently dropped. `-a/--array` and `-d/--dependency` become the job's `array` and
//! `dependsOn`, checked here so that a mistyped one names its line.
//!
//! The job has two task specs: `batch` (rank 0, which runs the script with its output
//! files) and `hold` (the other ranks, holding their nodes for steps, writing nowhere).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use crate::array::ArraySpec;
use crate::dependency::Dependency;
use crate::error::FileError;
use crate::job::JobSpec;
use crate::slurmtime::parse_slurm_time;

/// Largest script sent: it travels as one argument of the job's command, and Linux
/// refuses an argument of 128 KiB or more.
pub const MAX_SCRIPT_BYTES: usize = 100 << 10;

/// Where an option was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Line number in the script, from 1.
    Line(usize),
    CommandLine,
}

/// An option or script that cannot be taken, with where it was and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {message}")]
pub struct SbatchError {
    /// `train.sh:7` or `command line`.
    pub at: String,
    pub message: String,
}

/// The options understood, one per meaning (`-N` and `--nodes` are both `Nodes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Opt {
    JobName,
    Nodes,
    Ntasks,
    NtasksPerNode,
    CpusPerTask,
    Mem,
    MemPerCpu,
    Gres,
    GpusPerNode,
    GpusPerTask,
    Time,
    Partition,
    Output,
    Error,
    Chdir,
    Export,
    /// `--requeue` (value `yes`) and `--no-requeue` (`no`): the later one wins.
    Requeue,
    Signal,
    Switches,
    Wrap,
    Array,
    Dependency,
    /// `--kill-on-invalid-dep=yes|no`: `no` keeps a job whose dependency can never be met.
    KillOnInvalidDep,
    Hold,
    Begin,
    /// `-q/--qos`: the job's `priorityClassName`.
    Qos,
    /// `-A/--account`: the job's `account`.
    Account,
    Segment,
    // Read, not carried yet.
    Exclusive,
    // Command line only.
    IgnoreUnknown,
    DryRun,
}

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg {
    Required,
    /// Only as `--opt=value`.
    Optional,
    /// A flag; the value recorded is this.
    Fixed(&'static str),
}

struct OptInfo {
    opt: Opt,
    long: &'static str,
    short: Option<char>,
    arg: Arg,
}

const fn info(opt: Opt, long: &'static str, short: Option<char>, arg: Arg) -> OptInfo {
    OptInfo { opt, long, short, arg }
}

const OPTIONS: [OptInfo; 32] = [
    info(Opt::JobName, "job-name", Some('J'), Arg::Required),
    info(Opt::Nodes, "nodes", Some('N'), Arg::Required),
    info(Opt::Ntasks, "ntasks", Some('n'), Arg::Required),
    info(Opt::NtasksPerNode, "ntasks-per-node", None, Arg::Required),
    info(Opt::CpusPerTask, "cpus-per-task", Some('c'), Arg::Required),
    info(Opt::Mem, "mem", None, Arg::Required),
    info(Opt::MemPerCpu, "mem-per-cpu", None, Arg::Required),
    info(Opt::Gres, "gres", None, Arg::Required),
    info(Opt::GpusPerNode, "gpus-per-node", None, Arg::Required),
    info(Opt::GpusPerTask, "gpus-per-task", None, Arg::Required),
    info(Opt::Time, "time", Some('t'), Arg::Required),
    info(Opt::Partition, "partition", Some('p'), Arg::Required),
    info(Opt::Output, "output", Some('o'), Arg::Required),
    info(Opt::Error, "error", Some('e'), Arg::Required),
    info(Opt::Chdir, "chdir", Some('D'), Arg::Required),
    info(Opt::Export, "export", None, Arg::Required),
    info(Opt::Requeue, "requeue", None, Arg::Fixed("yes")),
    info(Opt::Requeue, "no-requeue", None, Arg::Fixed("no")),
    info(Opt::Signal, "signal", None, Arg::Required),
    info(Opt::Switches, "switches", None, Arg::Required),
    info(Opt::Wrap, "wrap", None, Arg::Required),
    info(Opt::Array, "array", Some('a'), Arg::Required),
    info(Opt::Dependency, "dependency", Some('d'), Arg::Required),
    info(Opt::KillOnInvalidDep, "kill-on-invalid-dep", None, Arg::Required),
    info(Opt::Hold, "hold", Some('H'), Arg::Fixed("")),
    info(Opt::Begin, "begin", Some('b'), Arg::Required),
    info(Opt::Qos, "qos", Some('q'), Arg::Required),
    info(Opt::Account, "account", Some('A'), Arg::Required),
    info(Opt::Segment, "segment", None, Arg::Required),
    info(Opt::Exclusive, "exclusive", None, Arg::Optional),
    info(Opt::IgnoreUnknown, "ignore-unknown", None, Arg::Fixed("")),
    info(Opt::DryRun, "dry-run", None, Arg::Fixed("")),
];

/// One option as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    pub place: Place,
    pub opt: Opt,
    /// How it was spelled (`-N`, `--nodes`), for messages.
    pub spelled: String,
    pub value: String,
}

/// An option hyperplan does not know, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    pub place: Place,
    pub text: String,
}

/// The options of a script or a command line, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directives {
    pub options: Vec<Directive>,
    pub unknown: Vec<Unknown>,
}

/// Names `place` in `file` for messages.
fn at(file: &str, place: Place) -> String {
    match place {
        Place::Line(n) => format!("{file}:{n}"),
        Place::CommandLine => "command line".into(),
    }
}

/// Reads a script's directives. `file` names it in errors.
pub fn read_script(file: &str, script: &str) -> Result<Directives, SbatchError> {
    let whole = |message: String| SbatchError {
        at: file.to_string(),
        message,
    };
    if script.len() > MAX_SCRIPT_BYTES {
        return Err(whole(format!(
            "expected a script of at most {} KiB (it travels as one argument), got {} bytes",
            MAX_SCRIPT_BYTES >> 10,
            script.len()
        )));
    }
    if script.contains('\0') {
        return Err(whole("expected a text script, got a NUL byte".into()));
    }
    if !script.starts_with("#!") {
        return Err(whole(
            "expected a batch script whose first line is #! and its interpreter (#!/bin/bash)".into(),
        ));
    }
    let mut out = Directives::default();
    for (i, line) in script.lines().enumerate().skip(1) {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if !t.starts_with('#') {
            break;
        }
        let Some(rest) = line.strip_prefix("#SBATCH").or_else(|| line.strip_prefix("#HP")) else {
            continue;
        };
        // `#SBATCHx` or `#HPC ...` is a comment, not a directive.
        if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
            continue;
        }
        let place = Place::Line(i + 1);
        let words = split_words(rest).map_err(|e| SbatchError {
            at: at(file, place),
            message: e.to_string(),
        })?;
        read_options(file, place, &words, &mut out)?;
    }
    Ok(out)
}

/// Reads `hyperplan sbatch`'s own options, up to the script: the options and what
/// follows them (the script and its arguments).
pub fn read_command_line(args: &[String]) -> Result<(Directives, Vec<String>), SbatchError> {
    let end = first_operand(args);
    let mut out = Directives::default();
    read_options("", Place::CommandLine, &args[..end], &mut out)?;
    let ignore = out.options.iter().any(|d| d.opt == Opt::IgnoreUnknown);
    // `--opt=value` may be ignored (its value is in it); `--opt` alone may not: whether
    // the next word is its value or the script cannot be told.
    if let Some(u) = out.unknown.iter().find(|u| !ignore || !u.text.contains('=')) {
        return Err(SbatchError {
            at: at("", Place::CommandLine),
            message: format!(
                "unknown option {}: expected an sbatch option (see hyperplan sbatch --help)",
                u.text
            ),
        });
    }
    Ok((out, args[end..].to_vec()))
}

/// Index of the first word that is not an option nor an option's value.
fn first_operand(args: &[String]) -> usize {
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            return i;
        }
        if !a.starts_with('-') || a == "-" {
            return i;
        }
        let takes_next = match find(a) {
            Some((o, inline)) => o.arg == Arg::Required && inline.is_none(),
            None => false,
        };
        i += if takes_next { 2 } else { 1 };
    }
    args.len().min(i)
}

/// The option `word` names and its value written in it (`--nodes=2`, `-N2`).
fn find(word: &str) -> Option<(&'static OptInfo, Option<&str>)> {
    if let Some(long) = word.strip_prefix("--") {
        let (name, value) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (long, None),
        };
        return OPTIONS.iter().find(|o| o.long == name).map(|o| (o, value));
    }
    let mut chars = word.strip_prefix('-')?.chars();
    let c = chars.next()?;
    let rest = chars.as_str();
    let o = OPTIONS.iter().find(|o| o.short == Some(c))?;
    Some((o, (!rest.is_empty()).then_some(rest)))
}

fn read_options(file: &str, place: Place, words: &[String], out: &mut Directives) -> Result<(), SbatchError> {
    let error = |message: String| SbatchError {
        at: at(file, place),
        message,
    };
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        i += 1;
        if !word.starts_with('-') || word == "-" || word == "--" {
            return Err(error(format!("expected an option (-N 2, --nodes=2), got {word:?}")));
        }
        let Some((o, inline)) = find(word) else {
            if place == Place::CommandLine {
                out.unknown.push(Unknown {
                    place,
                    text: word.clone(),
                });
                continue;
            }
            // Its value, if any, cannot be told from the next option: the rest of the
            // line goes with it.
            out.unknown.push(Unknown {
                place,
                text: words[i - 1..].join(" "),
            });
            return Ok(());
        };
        let spelled = match word.split_once('=') {
            Some((s, _)) if word.starts_with("--") => s.to_string(),
            _ if word.starts_with("--") => word.clone(),
            _ => word[..2].to_string(),
        };
        let value = match (o.arg, inline) {
            (Arg::Required, Some(v)) => v.to_string(),
            (Arg::Required, None) => {
                let v = words
                    .get(i)
                    .ok_or_else(|| error(format!("{spelled}: expected a value after it")))?;
                i += 1;
                v.clone()
            }
            (Arg::Optional, v) => v.unwrap_or_default().to_string(),
            (Arg::Fixed(v), None) => v.to_string(),
            (Arg::Fixed(_), Some(v)) => {
                return Err(error(format!("{spelled}: expected no value, got {v:?}")));
            }
        };
        if place != Place::CommandLine && matches!(o.opt, Opt::IgnoreUnknown | Opt::DryRun) {
            return Err(error(format!(
                "{spelled}: expected it on the command line, not in the script"
            )));
        }
        out.options.push(Directive {
            place,
            opt: o.opt,
            spelled,
            value,
        });
    }
    Ok(())
}

/// A quote a directive line opens and never closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("expected a closing {0} (the quote is not closed)")]
pub struct UnclosedQuote(pub char);

/// Splits a directive line into words as a shell would: blanks separate, `'...'` is
/// literal, `"..."` keeps blanks with `\"` `\\` `\$` `` \` `` escapes, `\x` outside quotes
/// is `x`, and a word starting with `#` ends the line (a comment).
pub fn split_words(line: &str) -> Result<Vec<String>, UnclosedQuote> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\r' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(UnclosedQuote('\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(e @ ('"' | '\\' | '$' | '`')) => word.push(e),
                            Some(other) => {
                                word.push('\\');
                                word.push(other);
                            }
                            None => return Err(UnclosedQuote('"')),
                        },
                        Some(c) => word.push(c),
                        None => return Err(UnclosedQuote('"')),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(e) = chars.next() {
                    word.push(e);
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// What is needed besides the directives to make the job.
pub struct BatchInput<'a> {
    /// Names the script in messages (`train.sh`); `""` with `--wrap`.
    pub file: &'a str,
    /// The script's text; `None` with `--wrap`.
    pub script: Option<&'a str>,
    /// Arguments after the script (`$1`...).
    pub args: &'a [String],
    /// The submitting environment, for `--export=NAME`.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub ignore_unknown: bool,
    /// The submitting client's clock (Unix seconds): `--begin now+1hour` and `--begin
    /// 08:00` become an instant with it, as sbatch's do.
    pub now: u64,
}

/// The job a script describes, without its name.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// `-J`; `None`: the caller picks one.
    pub name: Option<String>,
    /// The job file (JSON) without `name`.
    pub job: Value,
    /// What was taken with a difference, or not taken with `--ignore-unknown`.
    pub warnings: Vec<String>,
}

impl Batch {
    /// The job file under `name`.
    pub fn job_text(&self, name: &str) -> String {
        let mut job = self.job.clone();
        job["name"] = name.into();
        job.to_string()
    }

    /// The job as the planner reads it, checked by the job file's own rules.
    pub fn job_spec(&self, name: &str, file: &Path) -> Result<JobSpec, FileError> {
        let mut jobs = crate::job::parse_jobs(&self.job_text(name), file)?;
        jobs.pop().ok_or_else(|| {
            crate::yaml::file_error(file, crate::yaml::Pos::default(), "", "expected one job".to_string())
        })
    }
}

/// The `launch: batch` job for the script's directives overridden by the command line's.
pub fn build_job(script: &Directives, command_line: &Directives, input: &BatchInput<'_>) -> Result<Batch, SbatchError> {
    let mut warnings = Vec::new();
    for u in script.unknown.iter().chain(&command_line.unknown) {
        let message = format!(
            "unknown option {}: expected an sbatch option hyperplan knows (see hyperplan sbatch --help)",
            u.text
        );
        if input.ignore_unknown {
            warnings.push(format!(
                "{}: {message}; ignored (--ignore-unknown)",
                at(input.file, u.place)
            ));
        } else {
            return Err(SbatchError {
                at: at(input.file, u.place),
                message,
            });
        }
    }
    let mut last: BTreeMap<Opt, &Directive> = BTreeMap::new();
    for d in script.options.iter().chain(&command_line.options) {
        last.insert(d.opt, d);
    }
    let b = Builder {
        file: input.file,
        last: &last,
    };
    b.refuse_unsupported()?;

    let nodes = b.number(
        Opt::Nodes,
        "a number of nodes from 1 (ranges like 2-4 are not supported yet)",
    )?;
    let ntasks = b.number(Opt::Ntasks, "a number of tasks from 1")?;
    let per_node = b.number(Opt::NtasksPerNode, "a number of tasks per node from 1")?;
    let cpus = b
        .number(Opt::CpusPerTask, "a number of CPUs per task from 1")?
        .unwrap_or(1);
    let replicas = ntasks
        .or(nodes.zip(per_node).map(|(n, p)| n.saturating_mul(p)))
        .or(nodes)
        .unwrap_or(1);
    // Tasks per node, for what Slurm asks per node (--mem, --gres, --gpus-per-node).
    let tasks_per_node = per_node
        .or(nodes.filter(|n| replicas.is_multiple_of(*n)).map(|n| replicas / n))
        .or((replicas == 1).then_some(1));
    if let Some(d) = last.get(&Opt::Nodes)
        && replicas > 1
    {
        warnings.push(format!(
            "{}: {} {}: hyperplan places the job's {replicas} tasks by resources and topology; it does not hold them to exactly {} nodes",
            at(input.file, d.place),
            d.spelled,
            d.value,
            d.value
        ));
    }

    let mut resources = serde_json::Map::new();
    resources.insert("cpu".into(), cpus.into());
    if let Some(bytes) = b.memory(cpus, tasks_per_node)? {
        resources.insert("memory".into(), bytes.into());
    }
    if let Some(gpus) = b.gpus(tasks_per_node)? {
        resources.insert("nvidia.com/gpu".into(), gpus.into());
    }

    let command = match (last.get(&Opt::Wrap), input.script) {
        (Some(w), None) => vec!["/bin/sh".to_string(), "-c".to_string(), w.value.clone()],
        (Some(w), Some(_)) => return Err(b.error(w, "expected either --wrap or a script, not both".into())),
        (None, Some(text)) => script_command(input.file, text, input.args)?,
        (None, None) => {
            return Err(SbatchError {
                at: "command line".into(),
                message: "expected a script (hyperplan sbatch SCRIPT) or --wrap COMMAND".into(),
            });
        }
    };
    let mut task = json!({
        "name": "batch",
        "replicas": replicas,
        "resources": resources,
        "command": command,
    });
    if let Some(d) = last.get(&Opt::Chdir) {
        task["workingDir"] = d.value.clone().into();
    }
    for (opt, key) in [(Opt::Output, "output"), (Opt::Error, "error")] {
        if let Some(d) = last.get(&opt) {
            task[key] = b.pattern(d)?.into();
        }
    }
    let env = b.export(input.env, &mut warnings)?;
    if !env.is_empty() {
        task["env"] = Value::Object(env);
    }

    // Rank 0 runs the script; the other ranks only hold their nodes. They get a task of
    // their own writing to /dev/null: with the script's `-o slurm-%j.out` they would
    // open (and truncate) the very file the script is writing.
    let mut tasks = vec![task.clone()];
    if replicas > 1 {
        task["name"] = "hold".into();
        task["replicas"] = (replicas - 1).into();
        task["output"] = "/dev/null".into();
        if let Some(t) = task.as_object_mut() {
            t.remove("error");
        }
        tasks.push(task);
    }
    if let Some(first) = tasks.first_mut() {
        first["replicas"] = 1.into();
    }
    // Scripts written for Slurm read its variables: the tasks get them too.
    let mut job = json!({ "launch": "batch", "compat": "slurm", "tasks": tasks });
    if let Some(d) = last.get(&Opt::Time)
        && let Some(secs) = parse_slurm_time(&d.value).map_err(|e| b.error(d, e.to_string()))?
    {
        job["timeLimit"] = secs.to_string().into();
    }
    if let Some(d) = last.get(&Opt::Partition) {
        if d.value.contains(',') {
            return Err(b.error(
                d,
                format!(
                    "expected one partition (a hyperplan queue), got {:?}: several are not supported yet",
                    d.value
                ),
            ));
        }
        job["queue"] = d.value.clone().into();
    }
    if let Some(d) = last.get(&Opt::Requeue) {
        job["requeue"] = (d.value == "yes").into();
    }
    if let Some(d) = last.get(&Opt::Signal) {
        let (signal, grace) = b.signal(d)?;
        job["preemptSignal"] = signal.into();
        if let Some(g) = grace {
            job["preemptGrace"] = g.to_string().into();
        }
        warnings.push(format!(
            "{}: {}: hyperplan sends this signal when the job is preempted, not before its time limit",
            at(input.file, d.place),
            d.spelled
        ));
    }
    if let Some(d) = last.get(&Opt::Switches) {
        job["networkTopology"] = b.switches(d)?;
    }
    // A QOS is what a priority class is here: how far ahead a job goes, whom it preempts.
    if let Some(d) = last.get(&Opt::Qos) {
        crate::names::check_name(crate::names::NameKind::PriorityClass, &d.value)
            .map_err(|e| b.error(d, e.to_string()))?;
        job["priorityClassName"] = d.value.clone().into();
    }
    if let Some(d) = last.get(&Opt::Account) {
        crate::names::check_name(crate::names::NameKind::Account, &d.value).map_err(|e| b.error(d, e.to_string()))?;
        job["account"] = d.value.clone().into();
    }
    if let Some(d) = last.get(&Opt::Segment) {
        job["segments"] = b.segment(d, tasks_per_node)?;
    }
    if last.contains_key(&Opt::Hold) {
        job["hold"] = true.into();
    }
    if let Some(d) = last.get(&Opt::Begin) {
        let at = crate::begin::parse_begin(&d.value, input.now).map_err(|e| b.error(d, e.to_string()))?;
        job["begin"] = at.to_string().into();
    }
    if let Some(d) = last.get(&Opt::Array) {
        let spec = ArraySpec::parse(&d.value).map_err(|e| b.error(d, e.to_string()))?;
        job["array"] = spec.to_string().into();
    }
    if let Some(d) = last.get(&Opt::Dependency) {
        let dependency = Dependency::parse(&d.value).map_err(|e| b.error(d, e.to_string()))?;
        job["dependsOn"] = dependency.to_string().into();
    }
    if let Some(d) = last.get(&Opt::KillOnInvalidDep)
        && !b.kill_on_invalid_dep(d)?
    {
        job["keepOnFailedDependency"] = true.into();
    }
    let name = match last.get(&Opt::JobName) {
        None => None,
        Some(d) => {
            crate::names::check_name(crate::names::NameKind::Job, &d.value).map_err(|e| b.error(d, e.to_string()))?;
            Some(d.value.clone())
        }
    };
    Ok(Batch { name, job, warnings })
}

/// `[interpreter, its argument?, -c, SCRIPT, NAME, ARGS...]`: the script's text runs
/// as the script would, `$0` its name and `$1...` its arguments.
fn script_command(file: &str, text: &str, args: &[String]) -> Result<Vec<String>, SbatchError> {
    let first = text.lines().next().unwrap_or_default();
    let mut interpreter = first.trim_start_matches("#!").split_whitespace();
    let Some(program) = interpreter.next() else {
        return Err(SbatchError {
            at: format!("{file}:1"),
            message: "expected #! followed by the interpreter's path (#!/bin/bash)".into(),
        });
    };
    // Linux passes the rest of the #! line as one argument.
    let rest: Vec<&str> = interpreter.collect();
    let mut command = vec![program.to_string()];
    if !rest.is_empty() {
        command.push(rest.join(" "));
    }
    command.push("-c".into());
    command.push(text.to_string());
    let name = Path::new(file).file_name().and_then(|n| n.to_str()).unwrap_or(file);
    command.push(name.to_string());
    command.extend(args.iter().cloned());
    Ok(command)
}

/// Reads the options in effect.
struct Builder<'a> {
    file: &'a str,
    last: &'a BTreeMap<Opt, &'a Directive>,
}

impl Builder<'_> {
    fn error(&self, d: &Directive, message: String) -> SbatchError {
        SbatchError {
            at: at(self.file, d.place),
            message: format!("{}: {message}", d.spelled),
        }
    }

    /// Options the job model cannot carry yet: refused, naming their line.
    fn refuse_unsupported(&self) -> Result<(), SbatchError> {
        for (opt, d) in self.last {
            if matches!(opt, Opt::Exclusive) {
                return Err(self.error(
                    d,
                    "not supported by hyperplan yet (remove the line; see Coming from Slurm in README.md)".into(),
                ));
            }
        }
        Ok(())
    }

    /// `--segment=N`: groups of N nodes, each inside one HyperNode of tier 1 (a leaf, or
    /// an NVLink domain: Slurm's base block), as `segments` of N × tasks-per-node ranks.
    fn segment(&self, d: &Directive, tasks_per_node: Option<u32>) -> Result<Value, SbatchError> {
        let Some(nodes) = count(&d.value).filter(|n| *n > 0) else {
            return Err(self.error(d, format!("expected a number of nodes from 1, got {:?}", d.value)));
        };
        let Some(per_node) = tasks_per_node else {
            return Err(self.error(
                d,
                "expected --ntasks-per-node (or -N dividing --ntasks) with it: a segment is whole nodes and hyperplan counts ranks".into(),
            ));
        };
        Ok(json!([{ "size": nodes.saturating_mul(per_node), "tier": 1 }]))
    }

    /// `--kill-on-invalid-dep=yes|no`: whether a job whose dependency can never be met
    /// is cancelled (`yes`, the default) or kept (`no`).
    fn kill_on_invalid_dep(&self, d: &Directive) -> Result<bool, SbatchError> {
        match d.value.trim().to_ascii_lowercase().as_str() {
            "yes" => Ok(true),
            "no" => Ok(false),
            _ => Err(self.error(d, format!("expected yes or no, got {:?}", d.value))),
        }
    }

    fn number(&self, opt: Opt, expected: &str) -> Result<Option<u32>, SbatchError> {
        let Some(d) = self.last.get(&opt) else {
            return Ok(None);
        };
        match count(&d.value) {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(self.error(d, format!("expected {expected}, got {:?}", d.value))),
        }
    }

    /// Memory per task, in bytes: `--mem` (per node) over the tasks per node, or
    /// `--mem-per-cpu` times the CPUs per task.
    fn memory(&self, cpus: u32, tasks_per_node: Option<u32>) -> Result<Option<u64>, SbatchError> {
        match (self.last.get(&Opt::Mem), self.last.get(&Opt::MemPerCpu)) {
            (Some(_), Some(d)) => Err(self.error(d, "expected either --mem or --mem-per-cpu, not both".into())),
            (None, None) => Ok(None),
            (None, Some(d)) => {
                let per_cpu = self.size(d)?;
                Ok(Some(per_cpu.saturating_mul(u64::from(cpus))))
            }
            (Some(d), None) => {
                let per_node = self.size(d)?;
                let Some(t) = tasks_per_node else {
                    return Err(self.error(
                        d,
                        "expected --ntasks-per-node (or -N dividing --ntasks) with it: --mem is per node and hyperplan asks per task; or use --mem-per-cpu".into(),
                    ));
                };
                Ok(Some(per_node / u64::from(t)))
            }
        }
    }

    /// Slurm's sizes: a number with K, M, G or T (powers of 1024), megabytes without.
    fn size(&self, d: &Directive) -> Result<u64, SbatchError> {
        let expected = || {
            self.error(
                d,
                format!(
                    "expected a size like 4000, 500M, 64G or 1T (megabytes without a unit), got {:?}",
                    d.value
                ),
            )
        };
        let v = d.value.trim();
        let digits = v.bytes().take_while(u8::is_ascii_digit).count();
        let n: u64 = v[..digits].parse().map_err(|_| expected())?;
        let unit: u64 = match v[digits..].to_ascii_uppercase().as_str() {
            "K" | "KB" => 1 << 10,
            "" | "M" | "MB" => 1 << 20,
            "G" | "GB" => 1 << 30,
            "T" | "TB" => 1 << 40,
            _ => return Err(expected()),
        };
        if n == 0 {
            return Err(self.error(
                d,
                "expected a size above 0: 0 (all of a node's memory) is not supported yet".into(),
            ));
        }
        n.checked_mul(unit).ok_or_else(expected)
    }

    /// GPUs per task from `--gres=gpu:N`, `--gpus-per-node` or `--gpus-per-task`.
    fn gpus(&self, tasks_per_node: Option<u32>) -> Result<Option<u32>, SbatchError> {
        let given: Vec<&Directive> = [Opt::Gres, Opt::GpusPerNode, Opt::GpusPerTask]
            .iter()
            .filter_map(|o| self.last.get(o).copied())
            .collect();
        let Some(d) = given.last() else {
            return Ok(None);
        };
        if given.len() > 1 {
            return Err(self.error(
                d,
                "expected one of --gres=gpu:N, --gpus-per-node and --gpus-per-task, not several".into(),
            ));
        }
        let n = match d.opt {
            Opt::Gres => {
                let count_text = match d.value.split(':').collect::<Vec<_>>().as_slice() {
                    ["gpu"] => "1".to_string(),
                    ["gpu", n] => (*n).to_string(),
                    _ => {
                        return Err(self.error(
                            d,
                            format!(
                                "expected gpu:N (other resources and GPU types are not supported yet), got {:?}",
                                d.value
                            ),
                        ));
                    }
                };
                count(&count_text)
            }
            _ => count(&d.value),
        }
        .ok_or_else(|| self.error(d, format!("expected a number of GPUs, got {:?}", d.value)))?;
        if d.opt == Opt::GpusPerTask || n == 0 {
            return Ok(Some(n));
        }
        match tasks_per_node {
            Some(t) if n.is_multiple_of(t) => Ok(Some(n / t)),
            Some(t) => Err(self.error(
                d,
                format!("expected GPUs per node that divide among its {t} tasks, got {n}: hyperplan gives GPUs per task (use --gpus-per-task)"),
            )),
            None => Err(self.error(
                d,
                "expected --ntasks-per-node (or -N dividing --ntasks) with it: it is per node and hyperplan asks per task".into(),
            )),
        }
    }

    /// An output pattern in Slurm's words turned into the job file's.
    fn pattern(&self, d: &Directive) -> Result<String, SbatchError> {
        let mut out = String::with_capacity(d.value.len());
        let mut chars = d.value.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let replacement = match chars.next() {
                // Slurm's %j is the job's id (hyperplan's %i); its %x the name (%j).
                Some('j') => "%i",
                Some('x') => "%x",
                Some('A') => "%A",
                Some('a') => "%a",
                Some('u') => "%u",
                Some('N') => "%n",
                Some('%') => "%%",
                other => {
                    let got = other.map_or("a lone %".to_string(), |c| format!("%{c}"));
                    return Err(self.error(
                        d,
                        format!(
                            "expected the placeholders %j, %x, %A, %a, %u, %N or %%, got {got} in {:?}",
                            d.value
                        ),
                    ));
                }
            };
            out.push_str(replacement);
        }
        Ok(out)
    }

    /// `--export`: `NONE`, `ALL`, and `NAME` or `NAME=value` items, comma-separated.
    fn export(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        warnings: &mut Vec<String>,
    ) -> Result<serde_json::Map<String, Value>, SbatchError> {
        let mut out = serde_json::Map::new();
        let Some(d) = self.last.get(&Opt::Export) else {
            return Ok(out);
        };
        for item in d.value.split(',') {
            match item.split_once('=') {
                _ if item == "NONE" => {}
                _ if item == "ALL" => warnings.push(format!(
                    "{}: {} ALL: hyperplan does not copy the submitting environment; only the variables named are set",
                    at(self.file, d.place),
                    d.spelled
                )),
                Some((name, value)) if crate::taskenv::is_env_name(name) => {
                    out.insert(name.into(), value.into());
                }
                None if crate::taskenv::is_env_name(item) => match env(item) {
                    Some(v) => {
                        out.insert(item.into(), v.into());
                    }
                    None => {
                        return Err(self.error(
                            d,
                            format!("expected {item} to be set in this environment, to export it"),
                        ));
                    }
                },
                _ => {
                    return Err(self.error(
                        d,
                        format!("expected NONE, ALL, NAME or NAME=value items separated by commas, got {item:?}"),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// `--signal=[B:|R:]SIG[@SECONDS]`: the signal and its grace in seconds.
    fn signal(&self, d: &Directive) -> Result<(i32, Option<u64>), SbatchError> {
        let v = d.value.trim();
        let v = v.strip_prefix("B:").or_else(|| v.strip_prefix("R:")).unwrap_or(v);
        let (sig, time) = match v.split_once('@') {
            Some((s, t)) => (s, Some(t)),
            None => (v, None),
        };
        let signal = crate::taskend::warning_signal(sig).ok_or_else(|| {
            self.error(
                d,
                format!("expected a signal a task can catch (USR1, USR2, TERM, … or its number), got {sig:?}"),
            )
        })?;
        let grace = match time {
            None => None,
            Some(t) => Some(
                count(t)
                    .filter(|n| *n > 0)
                    .map(u64::from)
                    .ok_or_else(|| self.error(d, format!("expected seconds after @ (SIG@120), got {t:?}")))?,
            ),
        };
        Ok((signal, grace))
    }

    /// `--switches=1[@TIME]`: every task under one leaf switch, the hard limit at tier 1;
    /// with `@TIME`, soft once the job waited that long (`softAfter`).
    fn switches(&self, d: &Directive) -> Result<Value, SbatchError> {
        let (n, wait) = match d.value.split_once('@') {
            Some((n, w)) => (n, Some(w)),
            None => (d.value.as_str(), None),
        };
        // `@TIME`: waited that long for the switches, then placed anyway (soft).
        let soft_after = match wait {
            None => None,
            Some(w) => parse_slurm_time(w).map_err(|e| self.error(d, format!("@TIME: {e}")))?,
        };
        match count(n) {
            Some(1) => {
                let mut t = json!({ "mode": "hard", "highestTierAllowed": 1 });
                if let Some(secs) = soft_after {
                    t["softAfter"] = secs.to_string().into();
                }
                Ok(t)
            }
            Some(n) if n > 1 => Err(self.error(
                d,
                format!("expected --switches=1 (one leaf switch): at most {n} switches is not supported yet (hyperplan limits a job to a tier, see networkTopology)"),
            )),
            _ => Err(self.error(d, format!("expected a number of switches from 1, got {:?}", d.value))),
        }
    }
}

/// Plain decimal digits fitting a u32.
fn count(text: &str) -> Option<u32> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn words(line: &str) -> Vec<String> {
        split_words(line).unwrap()
    }

    #[test]
    fn words_split_as_a_shell_would() {
        assert_eq!(words(" --job-name=a  -N 2 "), ["--job-name=a", "-N", "2"]);
        assert_eq!(words("-J 'my job' --x=\"a b\\\"c\""), ["-J", "my job", "--x=a b\"c"]);
        assert_eq!(words("-o a\\ b # the output"), ["-o", "a b"]);
        assert_eq!(words("-o a#b"), ["-o", "a#b"]);
        assert_eq!(words("''"), [""]);
        assert!(split_words("-J 'open").is_err());
        assert!(split_words("-J \"open").is_err());
    }

    #[test]
    fn directives_stop_at_the_first_command() {
        let script = "#!/bin/bash\n#SBATCH -N2\n\n# a comment\n#HP --ntasks 4\n#SBATCHED nothing\n  #SBATCH -c 3\necho hi\n#SBATCH -t 5\n";
        let d = read_script("s.sh", script).unwrap();
        let got: Vec<(Place, Opt, &str)> = d.options.iter().map(|o| (o.place, o.opt, o.value.as_str())).collect();
        assert_eq!(
            got,
            [(Place::Line(2), Opt::Nodes, "2"), (Place::Line(5), Opt::Ntasks, "4"),]
        );
    }

    #[test]
    fn long_and_short_forms() {
        for line in ["-N 2", "-N2", "--nodes=2", "--nodes 2"] {
            let d = read_script("s", &format!("#!/bin/sh\n#SBATCH {line}\n")).unwrap();
            assert_eq!(
                (d.options[0].opt, d.options[0].value.as_str()),
                (Opt::Nodes, "2"),
                "{line}"
            );
        }
    }

    #[test]
    fn the_command_line_stops_at_the_script() {
        let args: Vec<String> = ["-N", "2", "--time=10", "--ignore-unknown", "job.sh", "-N", "x"]
            .map(String::from)
            .to_vec();
        let (d, rest) = read_command_line(&args).unwrap();
        assert_eq!(d.options.len(), 3);
        assert_eq!(rest, ["job.sh", "-N", "x"]);
        let ignored: Vec<String> = ["--mail-type=END", "--ignore-unknown", "job.sh"]
            .map(String::from)
            .to_vec();
        let (d, rest) = read_command_line(&ignored).unwrap();
        assert_eq!((d.unknown.len(), rest), (1, vec!["job.sh".to_string()]));
        let bad: Vec<String> = ["--ignore-unknown", "--frobnicate", "job.sh"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            read_command_line(&bad).unwrap_err().to_string(),
            "command line: unknown option --frobnicate: expected an sbatch option (see hyperplan sbatch --help)"
        );
    }
}
