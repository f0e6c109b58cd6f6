//! Least privilege, measured: every rule entry the chart grants the agent's or the
//! controller's service account (each verb × group × resource of each rule, in any render of
//! `nodesim/fixtures/rbac-chart.json`, i.e. any chart value combination the tests run) must
//! have allowed at least one request in the integration tests (the `target/rbac-used/*.txt`
//! files the harness appends to), or be listed with a reason in the allow-list.
//!
//!   cargo run -p nodesim --example rbac_coverage -- <used dir> <allow-list file>
//!
//! Allow-list lines: `<role>: <verb> <group> <resource>[ [names]] -- <reason>` as printed
//! here (the core group as `""`); `#` starts a comment. An entry that is exercised after all,
//! or granted by no render, is an error too: the list only shrinks.

use nodesim::apiserver::rbac::User;
use nodesim::apiserver::rbac_chart;
use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, allow] = args.as_slice() else {
        eprintln!("usage: rbac_coverage <used dir> <allow-list file>");
        return ExitCode::from(2);
    };
    let renders = match rbac_chart::renders() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rbac-coverage: {e}");
            return ExitCode::FAILURE;
        }
    };
    // "<role>: <entry>" → the renders granting it.
    let mut granted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in &renders {
        let label = if r.values.is_empty() {
            "defaults".to_string()
        } else {
            r.values.join(",")
        };
        for (ns, name) in [rbac_chart::AGENT, rbac_chart::CONTROLLER] {
            for (role, entry) in r.policy.granted(&User::service_account(ns, name)) {
                granted
                    .entry(format!("{role}: {entry}"))
                    .or_default()
                    .insert(label.clone());
            }
        }
    }
    let mut used = BTreeSet::new();
    let mut files = 0;
    for f in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        files += 1;
        let text = std::fs::read_to_string(f.path()).unwrap_or_default();
        for line in text.lines() {
            let cols: Vec<&str> = line.split('\t').collect();
            let [_user, role, verb, group, resource, names] = cols.as_slice() else {
                continue;
            };
            let entry = nodesim::apiserver::rbac::RuleEntry {
                verb: verb.to_string(),
                group: group.to_string(),
                resource: resource.to_string(),
                names: names.to_string(),
            };
            used.insert(format!("{role}: {entry}"));
        }
    }
    if files == 0 {
        eprintln!("rbac-coverage: no files in {dir}: run the integration tests first");
        return ExitCode::FAILURE;
    }
    let mut allowed: BTreeMap<String, String> = BTreeMap::new();
    let mut failed = false;
    for line in std::fs::read_to_string(allow).unwrap_or_default().lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once(" -- ") {
            Some((rule, reason)) if !reason.trim().is_empty() => {
                allowed.insert(rule.trim().to_string(), reason.trim().to_string());
            }
            _ => {
                eprintln!("FAIL  {allow}: no reason (` -- <reason>`): {line}");
                failed = true;
            }
        }
    }
    let mut unexercised = 0;
    for (rule, in_renders) in &granted {
        if used.contains(rule) {
            continue;
        }
        if allowed.contains_key(rule) {
            println!("allowed unexercised: {rule} ({})", allowed[rule]);
            continue;
        }
        unexercised += 1;
        let renders: Vec<&str> = in_renders.iter().map(String::as_str).collect();
        println!(
            "FAIL  granted, exercised by no test: {rule}  (renders: {})",
            renders.join(" | ")
        );
    }
    for rule in allowed.keys() {
        if !granted.contains_key(rule) {
            println!("FAIL  allow-list entry granted by no render: {rule}");
            failed = true;
        } else if used.contains(rule) {
            println!("FAIL  allow-list entry exercised after all (remove it): {rule}");
            failed = true;
        }
    }
    println!(
        "rbac-coverage: {} granted rule entries, {} exercised, {} allowed unexercised, {unexercised} unexercised ({files} test files)",
        granted.len(),
        granted.keys().filter(|r| used.contains(*r)).count(),
        granted.keys().filter(|r| !used.contains(*r) && allowed.contains_key(*r)).count(),
    );
    if failed || unexercised > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
