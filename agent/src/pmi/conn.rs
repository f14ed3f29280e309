//! One rank's PMI connection: lines in, answers out, until the rank closes its end. The
//! job's keys and barrier are the [`Hub`]'s. A rank that sends what the protocol cannot
//! answer (garbage, an overlong line) gets its socket closed and the agent logs one line
//! (rate-limited per agent run); nothing it sends can crash or stall the agent.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::hub::Hub;
use super::space::JobShape;
use super::wire::{self, Decoder, MAX_LINE, Request, Response};

/// Protocol errors logged per agent run; the rest are counted at debug level.
const MAX_LOGGED: u64 = 64;
static LOGGED: AtomicU64 = AtomicU64::new(0);

fn complain(shape: &JobShape, rank: u32, what: &str) {
    if LOGGED.fetch_add(1, Ordering::Relaxed) < MAX_LOGGED {
        tracing::warn!(job = %shape.job, job_id = %shape.job_id, rank, "PMI: {what}; closed the rank's PMI socket");
    } else {
        tracing::debug!(job = %shape.job, job_id = %shape.job_id, rank, "PMI: {what}; closed the rank's PMI socket");
    }
}

/// Serves `stream` (rank `rank` of `shape`) until it closes; then the hub forgets it.
pub async fn serve(hub: Hub, shape: JobShape, rank: u32, stream: tokio::net::UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut decoder = Decoder::new();
    let mut line = Vec::with_capacity(256);
    let kvsname = shape.kvsname();
    loop {
        line.clear();
        // One line, at most MAX_LINE bytes with its newline.
        match (&mut read).take(MAX_LINE as u64).read_until(b'\n', &mut line).await {
            Ok(0) => break,
            Ok(_) if line.last() != Some(&b'\n') => {
                if line.len() >= MAX_LINE {
                    complain(&shape, rank, &format!("a line longer than {MAX_LINE} bytes"));
                } // else: end of file inside a line; the rank is gone
                break;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(job = %shape.job, rank, "PMI socket: {e}");
                break;
            }
        }
        let request = match decoder.feed(&line) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => match e.refusal() {
                Some(answer) => {
                    if write.write_all(answer.encode().as_bytes()).await.is_err() {
                        break;
                    }
                    continue;
                }
                None => {
                    complain(&shape, rank, &e.to_string());
                    break;
                }
            },
        };
        let answer = if request == Request::BarrierIn {
            // Waiting for the others, the socket is watched too: a rank that dies in the
            // barrier (or writes during it) leaves, so its job's space can go.
            let mut waiting = hub.barrier_in(shape.job_id, rank);
            let mut watch = true;
            let released = loop {
                tokio::select! {
                    released = &mut waiting => break Some(released),
                    buffered = read.fill_buf(), if watch => match buffered {
                        // Gone.
                        Ok([]) | Err(_) => break None,
                        // A line ahead of the answer: read after it.
                        Ok(_) => watch = false,
                    },
                }
            };
            match released {
                Some(Ok(Ok(()))) => Response::BarrierOut,
                // The client reads any answer to a barrier as success: failing it means
                // closing the socket.
                Some(Ok(Err(why))) => {
                    tracing::warn!(job = %shape.job, rank, "PMI barrier failed: {why}");
                    break;
                }
                Some(Err(_)) | None => break,
            }
        } else {
            match answer(&hub, &shape, &kvsname, rank, request).await {
                Some(a) => a,
                None => break,
            }
        };
        if write.write_all(answer.encode().as_bytes()).await.is_err() {
            break;
        }
    }
    hub.detach(shape.job_id, rank);
}

/// The answer to one request but a barrier; `None` closes the connection (an abort).
async fn answer(hub: &Hub, shape: &JobShape, kvsname: &str, rank: u32, request: Request) -> Option<Response> {
    let wrong_space = |asked: &Option<String>| asked.as_deref().is_some_and(|k| k != kvsname);
    Some(match request {
        Request::Init { version, subversion } => wire::init_response(version, subversion),
        Request::InitAck { .. } => Response::InitAck {
            size: shape.size,
            rank,
            debug: 0,
        },
        Request::GetMaxes => Response::Maxes,
        Request::GetAppnum => Response::Appnum { appnum: 0 },
        Request::GetMyKvsname => Response::MyKvsname {
            kvsname: kvsname.to_string(),
        },
        Request::GetUniverseSize => Response::UniverseSize { size: shape.size },
        Request::Put { kvsname: asked, .. } if wrong_space(&asked) => {
            Response::error("put_result", "not this job's key-value space")
        }
        Request::Put { key, value, .. } => match hub.put(shape.job_id, &key, &value) {
            Ok(()) => Response::PutOk,
            Err(e) => Response::error("put_result", &e.to_string()),
        },
        Request::Get { kvsname: asked, .. } if wrong_space(&asked) => {
            Response::error("get_result", "not this job's key-value space")
        }
        Request::Get { key, .. } => match hub.get(shape.job_id, &key) {
            Some(value) => Response::GetOk { value },
            None => Response::GetNotFound,
        },
        // Answered by `serve`, which watches the socket while it waits.
        Request::BarrierIn => return None,
        Request::Finalize => Response::FinalizeAck,
        Request::Abort { code, message } => {
            tracing::warn!(
                job = %shape.job, job_id = %shape.job_id, rank, code,
                "PMI abort: {}", message.as_deref().unwrap_or("(no message)")
            );
            return None;
        }
        Request::Unsupported { cmd } => {
            let refusal =
                Request::Unsupported { cmd: cmd.clone() }.refusal(&format!("{cmd} is not served by hyperplan's PMI"));
            return refusal;
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::{BufRead, BufReader, Write};

    use super::super::hub::PmiTask;
    use super::*;

    fn shape() -> JobShape {
        JobShape {
            job: "j".into(),
            job_id: 1.into(),
            size: 2,
            local: [0, 1].into_iter().collect(),
            nodes: 1,
            mapping: "(vector,(0,1,2))".into(),
        }
    }

    /// Lets the connections run (the runtime polls their sockets between turns) until
    /// `done`; no clock involved.
    async fn until(mut done: impl FnMut() -> bool) {
        for _ in 0..1_000_000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the connections never got there");
    }

    #[tokio::test]
    async fn two_ranks_fence_and_a_rank_that_dies_in_a_barrier_leaves_it() {
        let hub = Hub::default();
        let (a, a_peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let (b, b_peer) = std::os::unix::net::UnixStream::pair().unwrap();
        for (rank, stream) in [(0, a_peer), (1, b_peer)] {
            hub.attach(PmiTask {
                shape: shape(),
                rank,
                uid: 1000,
                stream,
            });
        }
        // Both in, both out, and each sees the other's key.
        let talk = |mut s: &std::os::unix::net::UnixStream, line: &str| {
            s.write_all(line.as_bytes()).unwrap();
        };
        talk(&a, "cmd=put kvsname=hyperplan_1 key=k0 value=v0\n");
        talk(&b, "cmd=put kvsname=hyperplan_1 key=k1 value=v1\n");
        talk(&a, "cmd=barrier_in\n");
        talk(&b, "cmd=barrier_in\n");
        talk(&a, "cmd=get kvsname=hyperplan_1 key=k1\n");
        let lines = tokio::task::spawn_blocking(move || {
            let mut r = BufReader::new(a.try_clone().unwrap());
            let mut got = Vec::new();
            for _ in 0..3 {
                let mut l = String::new();
                r.read_line(&mut l).unwrap();
                got.push(l);
            }
            (got, a)
        });
        let (got, a) = lines.await.unwrap();
        assert_eq!(
            got,
            [
                "cmd=put_result rc=0\n",
                "cmd=barrier_out\n",
                "cmd=get_result rc=0 value=v1\n"
            ]
        );
        // Rank 0 enters the next barrier and dies there; rank 1 closes too: the job's
        // space goes.
        talk(&a, "cmd=barrier_in\n");
        drop(a);
        until(|| hub.jobs() == 1).await;
        drop(b);
        until(|| hub.jobs() == 0).await;
    }
}
