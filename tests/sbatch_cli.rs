//! `hyperplan sbatch` from the outside: the real binary on scripts in a temporary
//! directory, with `--dry-run` (the job file it would submit) and its errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

fn hyperplan(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hyperplan"))
        .current_dir(dir)
        .args(args)
        .env_remove("RUST_LOG")
        .env("HP_SBATCH_TEST", "from-env")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const SCRIPT: &str = "#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH -N 2
#SBATCH --ntasks-per-node 2
#SBATCH -c4
#SBATCH --mem=16G
#SBATCH -t 0-02:30
#SBATCH -o logs/%x-%j.out
#SBATCH --export=NONE,HP_SBATCH_TEST
#SBATCH --mail-type=END
srun ./sweep \"$@\"
";

#[test]
fn dry_run_prints_the_job_with_command_line_overrides() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sweep.sh"), SCRIPT).unwrap();
    let out = hyperplan(
        dir.path(),
        &[
            "sbatch",
            "--dry-run",
            "--ignore-unknown",
            "-t",
            "45",
            "sweep.sh",
            "--fast",
            "-N",
        ],
    );
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let job: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        job,
        json!({
            "name": "sweep",
            "launch": "batch",
            "compat": "slurm",
            "timeLimit": "2700",
            "tasks": [{
                "name": "batch",
                "replicas": 1,
                "resources": {"cpu": 4, "memory": 8u64 << 30},
                "command": ["/bin/bash", "-c", SCRIPT, "sweep.sh", "--fast", "-N"],
                "output": "logs/%x-%i.out",
                "env": {"HP_SBATCH_TEST": "from-env"},
            }, {
                "name": "hold",
                "replicas": 3,
                "resources": {"cpu": 4, "memory": 8u64 << 30},
                "command": ["/bin/bash", "-c", SCRIPT, "sweep.sh", "--fast", "-N"],
                "output": "/dev/null",
                "env": {"HP_SBATCH_TEST": "from-env"},
            }],
        })
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("warning: sweep.sh:10: unknown option --mail-type=END"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: sweep.sh:3: -N 2: hyperplan places the job's 4 tasks"),
        "{stderr}"
    );
}

#[test]
fn errors_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sweep.sh"), SCRIPT).unwrap();
    let out = hyperplan(dir.path(), &["sbatch", "--dry-run", "sweep.sh"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "hyperplan: sweep.sh:10: unknown option --mail-type=END: expected an sbatch option hyperplan knows (see hyperplan sbatch --help)\n"
    );
    std::fs::write(dir.path().join("a.sh"), "#!/bin/sh\n#HP --exclusive\nhostname\n").unwrap();
    let out = hyperplan(dir.path(), &["sbatch", "--dry-run", "a.sh"]);
    assert!(
        text(&out.stderr).contains("a.sh:2: --exclusive: not supported by hyperplan yet"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(dir.path().join("b.sh"), "#!/bin/sh\n#HP --array=1-10:0%2\nhostname\n").unwrap();
    let out = hyperplan(dir.path(), &["sbatch", "--dry-run", "b.sh"]);
    assert!(
        text(&out.stderr).contains("b.sh:2: --array: expected a step"),
        "{}",
        text(&out.stderr)
    );
    let out = hyperplan(dir.path(), &["sbatch", "--dry-run", "--frob", "a.sh"]);
    assert!(
        text(&out.stderr).contains("command line: unknown option --frob"),
        "{}",
        text(&out.stderr)
    );
    let out = hyperplan(dir.path(), &["sbatch", "--dry-run", "missing.sh"]);
    assert!(
        text(&out.stderr).contains("reading missing.sh"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn help_teaches() {
    let out = hyperplan(Path::new("."), &["sbatch", "--help"]);
    let help = text(&out.stdout);
    for want in [
        "#SBATCH",
        "--wrap",
        "--dry-run",
        "--ignore-unknown",
        "hyperplan sbatch -N 2",
        "refused until hyperplan has it: --exclusive",
        "Examples:",
    ] {
        assert!(help.contains(want), "{want:?} missing from:\n{help}");
    }
}

#[test]
fn submit_takes_a_script_alone_as_sbatch_does() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.sh"), "#!/bin/sh\n#SBATCH -N 1\nhostname\n").unwrap();
    std::fs::write(
        dir.path().join("job.yaml"),
        "name: j\ntasks: [{name: t, replicas: 1, resources: {cpu: 1}}]\n",
    )
    .unwrap();
    let out = hyperplan(dir.path(), &["submit", "job.yaml", "job.sh"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "hyperplan: job.sh is a batch script (it starts with #!): submit it alone, or with hyperplan sbatch job.sh\n"
    );
    let out = hyperplan(dir.path(), &["submit", "--wait", "job.sh"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--wait is for job files"),
        "{}",
        text(&out.stderr)
    );
    // Alone, it goes the way of sbatch (here to a planner that is not there).
    let out = hyperplan(
        dir.path(),
        &["submit", "--planner", "127.0.0.1:9", "--array", "1-2", "job.sh"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(!text(&out.stderr).contains("batch script"), "{}", text(&out.stderr));
}
