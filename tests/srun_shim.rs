//! `contrib/srun`, the shim for scripts written for Slurm: run by `/bin/sh` with a fake
//! `hyperplan` first on PATH that prints its arguments, so each `srun` form is checked
//! against the `hyperplan exec` or `hyperplan run` command line it becomes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

/// What one run of the shim did: its exit code, the fake's arguments (`|`-separated),
/// and its errors.
struct Ran {
    code: i32,
    args: String,
    stderr: String,
}

fn srun(fake_dir: &Path, in_job: bool, args: &[&str]) -> Ran {
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/srun");
    let path = format!("{}:/usr/bin:/bin", fake_dir.display());
    let mut cmd = Command::new("/bin/sh");
    cmd.arg(shim).args(args).env_clear().env("PATH", path);
    if in_job {
        cmd.env("HYPERPLAN_JOB", "train").env("HYPERPLAN_NNODES", "2");
    }
    let out = cmd.output().unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        args: String::from_utf8_lossy(&out.stdout).trim_end().to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The directory of the fake `hyperplan`: a file in the repository, not one written here
/// (a script just written may be busy (ETXTBSY) to exec while another test thread forks).
fn fake_hyperplan() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-hyperplan")
}

#[test]
fn inside_a_job_srun_becomes_hyperplan_exec() {
    let d = fake_hyperplan();
    let cases: [(&[&str], &str); 6] = [
        (&["hostname"], "exec|--all|--|hostname|"),
        (&["-l", "hostname", "-f"], "exec|--all|--|hostname|-f|"),
        (&["-n", "1", "echo", "a b"], "exec|--|echo|a b|"),
        (&["-n2", "--", "-x"], "exec|--all|--|-x|"),
        (&["--ntasks-per-node=1", "true"], "exec|--all|--|true|"),
        (&["--ntasks", "2", "--label", "true"], "exec|--all|--|true|"),
    ];
    for (args, want) in cases {
        let r = srun(&d, true, args);
        assert_eq!((r.code, r.args.as_str()), (0, want), "{args:?}: {}", r.stderr);
    }
}

#[test]
fn outside_a_job_srun_becomes_hyperplan_run() {
    let d = fake_hyperplan();
    let cases: [(&[&str], &str); 5] = [
        (&["hostname"], "run|-n|1|--|hostname|"),
        (&["-n", "4", "./a.out"], "run|-n|4|--|./a.out|"),
        (&["-N", "2", "--ntasks-per-node", "3", "-l", "x"], "run|-n|6|--|x|"),
        (&["-c4", "-J", "mine", "x"], "run|--name|mine|-n|1|--cpu|4|--|x|"),
        (&["--nodes=3", "x"], "run|-n|3|--|x|"),
    ];
    for (args, want) in cases {
        let r = srun(&d, false, args);
        assert_eq!((r.code, r.args.as_str()), (0, want), "{args:?}: {}", r.stderr);
    }
}

#[test]
fn unknown_options_and_unmappable_forms_are_refused() {
    let d = fake_hyperplan();
    let r = srun(&d, false, &["--mpi=pmix", "x"]);
    assert_eq!((r.code, r.args.as_str()), (2, ""));
    assert!(r.stderr.contains("option --mpi=pmix is not supported"), "{}", r.stderr);
    let r = srun(&d, true, &["-n", "3", "x"]);
    assert_eq!((r.code, r.args.as_str()), (2, ""));
    assert!(r.stderr.contains("one command per node"), "{}", r.stderr);
    let r = srun(&d, false, &["-n", "zero", "x"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("expected a number of tasks"), "{}", r.stderr);
    let r = srun(&d, false, &["-l"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("expected a command"), "{}", r.stderr);
}
