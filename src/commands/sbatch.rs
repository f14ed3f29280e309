//! `hyperplan sbatch [OPTIONS] SCRIPT [ARGS...]`: submit a batch script with `#SBATCH`
//! (or `#HP`) lines as Slurm's `sbatch` would, as a `launch: batch` job. The reading and
//! the mapping to a job are `hyperplan_shared::sbatch`'s; this is the command around them.

use std::path::Path;

use anyhow::{Context, bail};
use hyperplan_shared::limits::read_file_text;
use hyperplan_shared::sbatch::{
    BatchInput, Directives, MAX_SCRIPT_BYTES, Opt, build_job, read_command_line, read_script,
};

use super::long_help;
use crate::client::{ClientArgs, ClientConfig};

const EXAMPLES: &str = "  hyperplan sbatch job.sh
  hyperplan sbatch -N 2 --ntasks-per-node=4 -t 1:00:00 job.sh input.nml
  hyperplan sbatch -J nightly --time=2-00:00:00 -p long train.sh --epochs 90
  hyperplan sbatch --wrap 'hostname; nvidia-smi'
  hyperplan sbatch --dry-run job.sh          # print the job file, submit nothing
  hyperplan sbatch --ignore-unknown job.sh   # warn about --mail-type & co, submit anyway

  A script (the #SBATCH lines come before its first command):
    #!/bin/bash
    #SBATCH --job-name=cfd
    #SBATCH --nodes=2 --ntasks-per-node=4 --cpus-per-task=8
    #SBATCH --mem=256G --gres=gpu:4
    #SBATCH --time=12:00:00 --partition=gpu
    #SBATCH --output=logs/%x-%j.out
    mpirun ./cfd input.nml

  An array of 100 runs, 8 at a time, after the job prep succeeded:
    #!/bin/bash
    #SBATCH --job-name=sweep --array=1-100%8 --dependency=afterok:prep
    #SBATCH --output=logs/sweep-%A_%a.out
    ./sweep --case \"$SLURM_ARRAY_TASK_ID\"";

/// Default job names: the script's name, cut short, then `-<user>-<random>`.
const MAX_PREFIX: usize = 24;

/// Submit a batch script written for Slurm's sbatch (its `#SBATCH` lines, or `#HP`).
///
/// The options come from the script's `#SBATCH` and `#HP` lines at its top (up to its
/// first command) and from this command line, which overrides them. The job runs the
/// script once, on the node of its first task (`launch: batch`), with the whole
/// allocation described; `hyperplan exec` runs steps on the other tasks' nodes.
///
/// Taken, in Slurm's words: -J/--job-name, -N/--nodes, -n/--ntasks, --ntasks-per-node,
/// -c/--cpus-per-task, --mem (per node), --mem-per-cpu, --gres=gpu:N, --gpus-per-node,
/// --gpus-per-task, -t/--time (every Slurm format; UNLIMITED for none), -p/--partition
/// (the queue), -o/--output and -e/--error (%j the job's id, %x its name, %A the array's
/// id, %a the element's index, %u user, %N node, %%), -D/--chdir, --export (NONE, NAME,
/// NAME=value), --requeue/--no-requeue, --signal (sent at preemption), --switches=1[@TIME]
/// (one leaf switch; with @TIME placed anyway after waiting that long), -q/--qos (the
/// priority class), --segment=N (groups of N nodes, each in one tier-1 HyperNode),
/// -H/--hold, --begin, -a/--array (1-100%8: one job per index, at most
/// 8 at once), -d/--dependency (afterok:prep, after, afternotok, afterany, aftercorr,
/// singleton; , all of, ? any of), --kill-on-invalid-dep=yes|no (no: keep a job whose
/// dependency can never be met), -A/--account (the account it is charged to), --wrap.
///
/// Read, then refused until hyperplan has it: --exclusive.
/// Any other option is an error naming its line; with --ignore-unknown, a warning.
/// Differences: hyperplan asks per task, so --mem and GPUs per node are divided by the
/// tasks per node; -N sets how many tasks, not that exactly N nodes hold them (said
/// with a warning); the environment is not copied (ALL warns).
#[derive(clap::Args, Debug)]
#[command(
    after_long_help = long_help(EXAMPLES),
    override_usage = "hyperplan sbatch [--planner ...] [SBATCH OPTIONS] SCRIPT [ARGS...]\n       hyperplan sbatch [--planner ...] [SBATCH OPTIONS] --wrap COMMAND"
)]
pub struct Args {
    /// sbatch options (plus --dry-run and --ignore-unknown), then the script and its
    /// arguments. The connection options (--planner, --cert-dir, --user) come before them.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "WORDS"
    )]
    words: Vec<String>,
    #[command(flatten)]
    client: ClientArgs,
}

impl Args {
    /// `hyperplan sbatch WORDS...` as another command (`submit SCRIPT`) asks it.
    pub fn for_words(words: Vec<String>, client: ClientArgs) -> Self {
        Args { words, client }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (command_line, mut rest) = read_command_line(&args.words)?;
    let has = |opt: Opt| command_line.options.iter().any(|d| d.opt == opt);
    let dry_run = has(Opt::DryRun);
    if rest.first().is_some_and(|w| w == "--") {
        rest.remove(0);
    }
    let wrap = has(Opt::Wrap);
    let (file, text, script_args) = match rest.split_first() {
        Some(_) if wrap => bail!("expected either --wrap or a script, not both"),
        None if wrap => (String::new(), None, Vec::new()),
        None => bail!("expected a script: hyperplan sbatch [OPTIONS] SCRIPT [ARGS...]"),
        Some((script, script_args)) => {
            let text = read_file_text(Path::new(script), MAX_SCRIPT_BYTES as u64, "batch script")
                .with_context(|| format!("reading {script}"))?;
            (script.clone(), Some(text), script_args.to_vec())
        }
    };
    let directives = match &text {
        Some(t) => read_script(&file, t)?,
        None => Directives::default(),
    };
    let env = |name: &str| std::env::var(name).ok();
    let input = BatchInput {
        file: &file,
        script: text.as_deref(),
        args: &script_args,
        env: &env,
        ignore_unknown: has(Opt::IgnoreUnknown),
        now: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let batch = build_job(&directives, &command_line, &input)?;
    for w in &batch.warnings {
        eprintln!("hyperplan sbatch: warning: {w}");
    }
    let prefix = name_prefix(&file);
    if dry_run {
        let name = batch.name.clone().unwrap_or_else(|| prefix.clone());
        let value: serde_json::Value = serde_json::from_str(&batch.job_text(&name)).context("encoding the job")?;
        println!("{}", serde_json::to_string_pretty(&value).context("encoding the job")?);
        return Ok(());
    }
    let config = ClientConfig::from_process(&args.client)?;
    let (name, id) = match &batch.name {
        Some(name) => super::run::submit(&config, batch.job_text(name))?,
        None => submit_default_name(&config, &prefix, |n| batch.job_text(n))?,
    };
    // An array answers with its id and name, as Slurm's does (its elements are ID_INDEX).
    match hyperplan_shared::array::split_element_name(&name) {
        Some((array, _)) => println!(
            "Submitted batch job {id} ({array}: array {}, elements {id}_INDEX)",
            batch.job["array"].as_str().unwrap_or("")
        ),
        None => println!("Submitted batch job {id} ({name})"),
    }
    Ok(())
}

/// Tries default names ([`super::run::default_name`]) a few times: another job may
/// hold one.
fn submit_default_name(
    config: &ClientConfig,
    prefix: &str,
    text: impl Fn(&str) -> String,
) -> anyhow::Result<(String, u64)> {
    let mut tries = 0;
    loop {
        tries += 1;
        let name = super::run::default_name(prefix, &config.user.value, random());
        match super::run::submit(config, text(&name)) {
            Err(e) if tries < 3 && e.to_string().contains(&name) => {
                eprintln!("hyperplan sbatch: {e:#}; trying another name");
            }
            done => return done,
        }
    }
}

/// The script's name without its extension, in job-name characters; `sbatch` for --wrap.
fn name_prefix(file: &str) -> String {
    let stem = Path::new(file).file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let clean: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .skip_while(|c| !c.is_ascii_alphanumeric())
        .take(MAX_PREFIX)
        .collect();
    if clean.is_empty() { "sbatch".into() } else { clean }
}

/// 64 random bits (the kernel's), or the time and pid where they cannot be read.
fn random() -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            nanos ^ (u64::from(std::process::id()) << 32)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn default_names_come_from_the_script() {
        assert_eq!(name_prefix("jobs/train.sh"), "train");
        assert_eq!(name_prefix(".hidden.sh"), "hidden");
        assert_eq!(name_prefix(""), "sbatch");
        assert_eq!(name_prefix("a b+c.slurm"), "a-b-c");
        assert_eq!(name_prefix(&"x".repeat(100)).len(), MAX_PREFIX);
    }
}
