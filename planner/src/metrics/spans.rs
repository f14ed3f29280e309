//! Tick time per system, from the spans the core already opens (`tick`, and one per
//! system: `ingest`, `allocate`, …): a `tracing` layer that times each from its creation
//! to its close and feeds `hyperplan_tick_duration_seconds{system}`. The core keeps no
//! clock; the daemon's subscriber does the timing. The layer sees spans whatever
//! `RUST_LOG` says: the log's filter is the log layer's alone.

use std::time::Instant;

use tracing::span::{Attributes, Id};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::Metrics;

/// The spans that are the tick and its systems (a system's span is named after what it
/// does). Others (`source`, per discovery source) are not timed.
const SYSTEMS: &[&str] = &[
    "tick",
    "ingest",
    "adopt",
    "node_health",
    "lost",
    "invalidate",
    "discovery",
    "topology_index",
    "resource_cache",
    "numa_cache",
    "recover",
    "queue_account",
    "rank",
    "allocate",
    "preempt",
    "replace",
    "fairshare",
    "dispatch",
    "relaunch",
    "count_live",
    "retire",
    "persist",
];

/// Whether `meta` is a span this layer times (its per-layer filter).
pub fn timed(meta: &Metadata<'_>) -> bool {
    meta.is_span() && meta.target().starts_with("hyperplan_core") && SYSTEMS.contains(&meta.name())
}

/// The layer (see the module documentation).
#[derive(Debug)]
pub struct SpanTimes(pub Metrics);

struct Started(Instant);

impl<S> Layer<S> for SpanTimes
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, _attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Started(Instant::now()));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(took) = span.extensions().get::<Started>().map(|s| s.0.elapsed()) else {
            return;
        };
        self.0
            .tick
            .get_or_create(&vec![("system", span.name().to_string())])
            .observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[test]
    fn the_tick_and_its_systems_are_timed_whatever_the_log_filter() {
        let metrics = Metrics::new();
        let layer = SpanTimes(metrics.clone()).with_filter(tracing_subscriber::filter::filter_fn(timed));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let mut p = hyperplan_core::Planner::new(hyperplan_core::PlannerConfig::default());
            p.tick(1);
            p.tick(2);
        });
        let text = metrics.encode();
        for system in ["tick", "ingest", "allocate", "dispatch"] {
            let line = format!("hyperplan_tick_duration_seconds_count{{system=\"{system}\"}} 2");
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
    }
}
