//! Accounts (`[[account]]`, issue 40): a job is charged to the account it names or to its
//! submitter's default, written into its record; an unknown account, one the submitter
//! may not charge, or one its queue does not take is refused at submit; an account's
//! quotas (`maxRunningJobs`, `maxCpus`, `maxGpus`, over it and every account below it)
//! keep a job waiting, saying which, until room comes back. Invariants are checked after
//! every tick.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hyperplan_core::PlannerConfig;
use hyperplan_core::accounts::check::AccountRefusal;
use hyperplan_core::caller::Caller;
use hyperplan_core::model::record::JobRecord;
use hyperplan_core::requests::submit::SubmitRefused;
use hyperplan_core::testing::{ClusterBuilder, JobBuilder, Rig};
use hyperplan_shared::JobSpec;
use hyperplan_shared::report::JobStatus;

const ACCOUNTS: &str = r#"
[[account]]
name = "science"
users = ["carol"]
maxCpus = 8

[[account]]
name = "physics"
parent = "science"
users = ["alice"]
defaultFor = ["alice"]
maxRunningJobs = 1

[[account]]
name = "chem"
parent = "science"
users = ["bob"]
defaultFor = ["bob"]

[[account]]
name = "admin"

[[queue]]
name = "phys"
accounts = ["physics"]
"#;

/// Two registered nodes of 8 CPUs and 8 GPUs, planning with `config`, records written.
fn rig(config: &str) -> Rig {
    let config = PlannerConfig::parse(config, "planner.toml").unwrap_or_else(|e| panic!("{e}"));
    let mut rig = Rig::new(config, ClusterBuilder::flat(2).build().nodes).persisting();
    rig.register_all();
    rig.tick();
    rig
}

fn job(name: &str, resources: &str, account: Option<&str>) -> JobSpec {
    let mut j = JobBuilder::gang(name, 1, resources).build();
    j.account = account.map(str::to_string);
    j
}

/// The account in the stored record of job `id`.
fn stored_account(rig: &Rig, id: u64) -> Option<String> {
    let (_, bytes) = rig.store.get(&id).unwrap_or_else(|| panic!("no record of job {id}"));
    JobRecord::decode(bytes).unwrap().spec.account
}

fn reason(rig: &Rig, job: &str) -> Option<String> {
    rig.job(job).reason
}

#[test]
fn a_job_without_an_account_is_charged_to_the_default_and_its_record_says_so() {
    let mut rig = rig(ACCOUNTS);
    let ids = rig
        .submit_now(
            vec![job("a", "cpu=1", None), job("b", "cpu=1", Some("physics"))],
            "alice",
        )
        .unwrap();
    for (id, _) in &ids {
        assert_eq!(stored_account(&rig, *id).as_deref(), Some("physics"));
    }
    // Every element of an array too.
    let mut sweep = JobBuilder::gang("sweep", 1, "cpu=1").array("1-3").build();
    sweep.account = None;
    let ids = rig.submit_now(vec![sweep], "bob").unwrap();
    assert_eq!(ids.len(), 3);
    for (id, _) in &ids {
        assert_eq!(stored_account(&rig, *id).as_deref(), Some("chem"));
    }
    // carol (listed in science) may charge the accounts below it.
    let ids = rig.submit_now(vec![job("c", "cpu=1", Some("chem"))], "carol").unwrap();
    assert_eq!(stored_account(&rig, ids[0].0).as_deref(), Some("chem"));
}

#[test]
fn an_unknown_or_forbidden_account_or_none_at_all_is_refused() {
    let mut rig = rig(ACCOUNTS);
    let next = rig.p.next_job_id();
    let refused = |r: Result<Vec<(u64, String)>, SubmitRefused>| match r {
        Err(SubmitRefused::Account(e)) => e,
        other => panic!("expected an account refusal, got {other:?}"),
    };
    let e = refused(rig.submit_now(vec![job("a", "cpu=1", Some("phisics"))], "alice"));
    assert!(matches!(e, AccountRefusal::Unknown { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "job a: account \"phisics\" does not exist; accounts: admin, chem, physics, science"
    );
    let e = refused(rig.submit_now(vec![job("a", "cpu=1", Some("physics"))], "bob"));
    assert_eq!(
        e.to_string(),
        "job a: user bob may not charge account \"physics\"; it takes users alice, carol (listed in it or in an account above it)"
    );
    let e = refused(rig.submit_now(vec![job("a", "cpu=1", None)], "dave"));
    assert!(matches!(e, AccountRefusal::NoDefault { .. }), "{e}");
    assert!(e.to_string().contains("user dave has no default account"), "{e}");
    // All or nothing: a good job before a bad one is not admitted either.
    let e = refused(rig.submit_now(
        vec![job("ok", "cpu=1", None), job("bad", "cpu=1", Some("admin"))],
        "alice",
    ));
    assert!(matches!(e, AccountRefusal::NotAllowed { .. }), "{e}");
    assert_eq!(rig.p.job("ok"), None);
    assert_eq!(rig.p.next_job_id(), next, "a refusal uses no id");
    // An admin may charge any account.
    let admitted = rig
        .p
        .submit(
            vec![job("root-job", "cpu=1", Some("admin"))],
            Caller::admin("root"),
            rig.now,
        )
        .unwrap();
    assert_eq!(admitted.len(), 1);
}

#[test]
fn a_queue_with_accounts_takes_only_their_jobs() {
    let mut rig = rig(ACCOUNTS);
    let mut j = job("p", "cpu=1", None);
    j.queue = Some("phys".into());
    rig.submit_now(vec![j], "alice").unwrap();
    let mut j = job("c", "cpu=1", Some("chem"));
    j.queue = Some("phys".into());
    match rig.submit_now(vec![j], "carol") {
        Err(SubmitRefused::Account(e @ AccountRefusal::Queue { .. })) => assert_eq!(
            e.to_string(),
            "job c: queue \"phys\" takes jobs of account physics (and the accounts below), not of \"chem\""
        ),
        other => panic!("expected the queue's refusal, got {other:?}"),
    }
}

#[test]
fn a_quota_keeps_a_job_waiting_until_another_ends() {
    let mut rig = rig(ACCOUNTS);
    let ids = rig
        .submit_now(vec![job("first", "cpu=1", None), job("second", "cpu=1", None)], "alice")
        .unwrap();
    rig.step();
    assert_eq!(rig.job("first").status, JobStatus::Placed);
    assert_eq!(rig.job("second").status, JobStatus::Pending);
    let why = "account physics runs its maxRunningJobs (1) jobs already";
    assert_eq!(reason(&rig, "second").as_deref(), Some(why));
    assert_eq!(
        rig.p.explain("second").map(|e| e.job.reason),
        Some(Some(why.to_string()))
    );
    // bob's chem is not physics: it runs beside.
    rig.submit_now(vec![job("other", "cpu=1", None)], "bob").unwrap();
    rig.start_all("first", ids[0].0);
    rig.step();
    assert_eq!(rig.job("other").status, JobStatus::Placed);
    assert_eq!(rig.job("second").status, JobStatus::Pending);
    rig.exit_all("first", 0);
    rig.drive_until(5, |r| r.job("second").status == JobStatus::Placed);
}

#[test]
fn a_parents_quota_counts_its_children() {
    let mut rig = rig(ACCOUNTS);
    // physics takes 6 of science's 8 CPUs; chem (also below science) cannot have 4 more.
    let ids = rig.submit_now(vec![job("phys", "cpu=6", None)], "alice").unwrap();
    rig.step();
    assert_eq!(rig.job("phys").status, JobStatus::Placed);
    rig.start_all("phys", ids[0].0);
    rig.submit_now(vec![job("chem4", "cpu=4", None), job("chem2", "cpu=2", None)], "bob")
        .unwrap();
    rig.step();
    assert_eq!(rig.job("chem4").status, JobStatus::Pending);
    assert_eq!(
        reason(&rig, "chem4").as_deref(),
        Some("account science (above chem) would use 10 CPUs of its maxCpus 8 (in use 6, the job asks 4)")
    );
    // What fits within the parent's quota still starts.
    assert_eq!(rig.job("chem2").status, JobStatus::Placed);
    rig.start_all("chem2", ids[0].0 + 2);
    rig.step();
    rig.exit_all("phys", 0);
    rig.drive_until(5, |r| r.job("chem4").status == JobStatus::Placed);
}

#[test]
fn a_gpu_quota_keeps_gpu_jobs_within_it() {
    let mut rig = rig("[[account]]\nname = \"ml\"\nusers = [\"alice\"]\ndefaultFor = [\"alice\"]\nmaxGpus = 8\n");
    rig.submit_now(
        vec![
            job("g6", "cpu=1,nvidia.com/gpu=6", None),
            job("g4", "cpu=1,nvidia.com/gpu=4", None),
            job("cpu", "cpu=1", None),
        ],
        "alice",
    )
    .unwrap();
    rig.step();
    assert_eq!(rig.job("g6").status, JobStatus::Placed);
    assert_eq!(
        reason(&rig, "g4").as_deref(),
        Some("account ml would use 10 GPUs of its maxGpus 8 (in use 6, the job asks 4)")
    );
    assert_eq!(rig.job("cpu").status, JobStatus::Placed);
}

#[test]
fn without_accounts_an_account_is_free_text() {
    let mut rig = Rig::flat_ready(2);
    let ids = rig
        .submit_now(
            vec![job("a", "cpu=1", Some("whatever")), job("b", "cpu=1", None)],
            "alice",
        )
        .unwrap();
    assert_eq!(stored_account(&rig, ids[0].0).as_deref(), Some("whatever"));
    assert_eq!(stored_account(&rig, ids[1].0), None);
    rig.step();
    assert_eq!(rig.job("a").status, JobStatus::Placed);
}

#[test]
fn a_reload_keeps_an_account_that_live_jobs_are_charged_to() {
    let mut rig = rig(ACCOUNTS);
    rig.submit_now(vec![job("a", "cpu=1", None)], "alice").unwrap();
    rig.step();
    let without_physics = PlannerConfig::parse(
        "[[account]]\nname = \"science\"\nusers = [\"alice\"]\ndefaultFor = [\"alice\"]\n",
        "planner.toml",
    )
    .unwrap();
    let e = rig.p.reload_policy(&without_physics).unwrap_err();
    assert_eq!(
        e.to_string(),
        "account \"physics\" is not in the new configuration but still has 1 live job(s) charged to it (e.g. a); keeping the old policy until they end or are cancelled"
    );
    // With no [[account]] at all accounts are free text again: taken.
    rig.p.reload_policy(&PlannerConfig::default()).unwrap();
    rig.step();
    assert_eq!(rig.job("a").status, JobStatus::Placed);
}
