//! The signal benchmark's table and its comparison with the bars of issues 14 and 30.

use crate::{Knobs, Measured};
use std::time::Duration;

pub struct Row {
    pub volumes: usize,
    pub kind: String,
    pub measured: Measured,
}

#[derive(Default)]
pub struct Summary {
    pub rows: Vec<Row>,
    /// reloadlet's wakeups over an idle window.
    pub idle: Option<(u64, usize, Duration)>,
    /// Every volume swapped at once, per agent binary (no bar).
    pub bursts: Vec<crate::bursts::Bursts>,
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

impl Summary {
    fn get(&self, volumes: usize, kind: &str) -> Option<&Measured> {
        self.rows
            .iter()
            .find(|r| r.volumes == volumes && r.kind == kind && r.measured.note.is_empty())
            .map(|r| &r.measured)
    }

    pub fn print(&self, k: &Knobs) {
        println!(
            "{:>7}  {:<9} {:>5} {:>8} {:>8} {:>8} {:>6} {:>5} {:>9} {:>9} {:>5}",
            "volumes",
            "approach",
            "swaps",
            "p50 ms",
            "p99 ms",
            "max ms",
            "misses",
            "extra",
            "RSS MiB",
            "PSS MiB",
            "procs"
        );
        for r in &self.rows {
            let m = &r.measured;
            if !m.note.is_empty() {
                println!("{:>7}  {:<9} {}", r.volumes, r.kind, m.note);
                continue;
            }
            let o = &m.outcome;
            println!(
                "{:>7}  {:<9} {:>5} {:>8.3} {:>8.3} {:>8.3} {:>6} {:>5} {:>9.1} {:>9.1} {:>5}",
                r.volumes,
                r.kind,
                o.lat_ms.len() + o.misses,
                o.percentile(0.5),
                o.percentile(0.99),
                o.max(),
                o.misses,
                o.extra,
                m.memory.rss_mib(),
                m.memory.pss_mib(),
                m.memory.procs
            );
        }
        println!("   (RSS: summed over every process of the approach; PSS: shared pages split among them)");
        println!("== reloadlet against the bars (issues 14 and 30)");
        let (s, l) = (k.small, k.large);
        let ratio = |size: usize, who: &str, other: &str, p: f64| -> Option<f64> {
            let r = self.get(size, who)?;
            let o = self.get(size, other)?;
            Some(r.outcome.percentile(p) / o.outcome.percentile(p))
        };
        let line =
            |what: String, value: Option<f64>, unit: &str, bar: &str, ok: &dyn Fn(f64) -> bool| {
                match value {
                    Some(v) => println!(
                        "{what:<44} {v:>8.2}{unit:<4} bar {bar:<10} {}",
                        verdict(ok(v))
                    ),
                    None => println!("{what:<44} {:>8}     bar {bar:<10} n/a", "-"),
                }
            };
        for size in [s, l] {
            line(
                format!("p50 / floor p50 at {size} volumes"),
                ratio(size, "reloadlet", "floor", 0.5),
                "x",
                "<= 1.5x",
                &|v| v <= 1.5,
            );
        }
        line(
            format!("p50 / sidecar p50 at {s} volumes"),
            ratio(s, "reloadlet", "sidecar", 0.5),
            "x",
            "<= 0.5x",
            &|v| v <= 0.5,
        );
        line(
            format!("p99 / floor p99 at {l} volumes"),
            ratio(l, "reloadlet", "floor", 0.99),
            "x",
            "<= 1.5x",
            &|v| v <= 1.5,
        );
        line(
            format!("max at {l} volumes"),
            self.get(l, "reloadlet").map(|m| m.outcome.max()),
            "ms",
            "<= 5 ms",
            &|v| v <= 5.0,
        );
        for size in [s, l] {
            line(
                format!("misses at {size} volumes"),
                self.get(size, "reloadlet")
                    .map(|m| (m.outcome.misses + m.outcome.extra) as f64),
                "",
                "0",
                &|v| v == 0.0,
            );
        }
        let rss = |who: &str| self.get(l, who).map(|m| m.memory.rss_mib());
        line(
            format!("RSS at {l} volumes (glibc build)"),
            rss("reloadlet"),
            "MiB",
            "<= 16 MiB",
            &|v| v <= 16.0,
        );
        line(
            format!("RSS at {l} volumes (static, the image's)"),
            rss("static"),
            "MiB",
            "<= 12 MiB",
            &|v| v <= 12.0,
        );
        line(
            match self.idle {
                Some((_, 0, w)) => format!("wakeups while idle for {} s", w.as_secs()),
                Some((_, ended, w)) => {
                    format!("wakeups idle {} s ({ended} threads ended)", w.as_secs())
                }
                None => "wakeups while idle".into(),
            },
            self.idle.map(|(n, _, _)| n as f64),
            "",
            "0",
            &|v| v == 0.0,
        );
        if self.get(l, "static").is_some() {
            line(
                format!("static: p99 / floor p99 at {l} volumes"),
                ratio(l, "static", "floor", 0.99),
                "x",
                "<= 1.5x",
                &|v| v <= 1.5,
            );
            line(
                format!("static: max at {l} volumes"),
                self.get(l, "static").map(|m| m.outcome.max()),
                "ms",
                "<= 5 ms",
                &|v| v <= 5.0,
            );
        }
        println!("   (misses counts swaps with no SIGHUP in time plus SIGHUPs matched to no swap)");
        println!("== more ratios (no bar)");
        let mem = |size: usize, other: &str| -> Option<f64> {
            Some(
                self.get(size, "reloadlet")?.memory.rss_mib()
                    / self.get(size, other)?.memory.rss_mib(),
            )
        };
        let info = |what: String, v: Option<f64>| match v {
            Some(v) => println!("{what:<44} {v:>8.2}x"),
            None => println!("{what:<44} {:>8}", "-"),
        };
        // The median of the blocks' own p99s: the approach on a typical stretch of the run,
        // whatever the noisiest blocks did.
        let typical = |size: usize, who: &str| -> Option<f64> {
            let mut v = self.get(size, who)?.block_p99.clone();
            v.retain(|x| x.is_finite());
            (!v.is_empty()).then(|| crate::swaps::percentile(&v, 0.5))
        };
        for who in ["reloadlet", "static"] {
            if let (Some(a), Some(f)) = (typical(l, who), typical(l, "floor")) {
                info(
                    format!("{who}: median block p99 / floor's, {l} volumes"),
                    Some(a / f),
                );
            }
        }
        info(
            format!("p99 / floor p99 at {s} volumes"),
            ratio(s, "reloadlet", "floor", 0.99),
        );
        info(
            format!("p99 / sidecar p99 at {s} volumes"),
            ratio(s, "reloadlet", "sidecar", 0.99),
        );
        for size in [s, l] {
            info(
                format!("RSS / floor RSS at {size} volumes"),
                mem(size, "floor"),
            );
        }
        info(
            format!("RSS / sidecar fleet RSS at {s} volumes"),
            mem(s, "sidecar"),
        );
        for b in &self.bursts {
            let who = b.kind.name();
            let bar = if b.kind == crate::Kind::Static {
                12
            } else {
                16
            };
            let phases = [
                ("bursts", "", &b.live),
                ("held bursts", ", from the agent's release", &b.held),
            ];
            for (name, from, phase) in phases.into_iter().filter(|p| p.2.rounds > 0) {
                println!(
                    "{:<44} {:>8.0}ms  ({} {name} of {} volumes{from}; {} pods missed in all bursts)",
                    format!("{who}: {name}, last signal (worst)"),
                    phase.range_ms().1,
                    phase.rounds,
                    b.volumes,
                    b.missed
                );
                println!(
                    "{:<44} {:>8.2}MiB (bar for steady swaps: {bar} MiB)",
                    format!("{who}: RSS after the {name}"),
                    phase.memory.rss_mib(),
                );
            }
        }
    }
}
