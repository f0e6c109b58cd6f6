//! RBAC in the integration tests: the agent and the controller run with their own service
//! accounts' tokens, authorized by the simulated API server with the RBAC objects the chart
//! renders (`nodesim::apiserver::rbac_chart`, kept equal to the chart and the kustomize base
//! by `hack/render-rbac.sh --check`). At the end of a test ([`Node`]'s drop) any 403 the
//! test did not declare (`node.api.expect_forbidden`) fails it, and the rule entries the
//! service accounts used are appended to `target/rbac-used/<test>.txt`
//! (`RELOADLET_RBAC_USED_DIR` overrides the folder) for `hack/check-rbac-coverage.sh`.

use super::Node;
use nodesim::apiserver::rbac_chart;
use std::io::Write;
use std::path::PathBuf;

/// The chart's `--set` values that give the controller these flags and environment, as
/// `deploy/chart/reloadlet/templates/controller-deployment.yaml` maps values to flags.
pub fn controller_chart_values(args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let flag = |name: &str, env_name: &str| -> Option<bool> {
        let from_args = args.iter().rev().find_map(|a| {
            let rest = a.strip_prefix(name)?;
            match rest {
                "" => Some(true),
                r => r.strip_prefix('=').map(|v| v == "true"),
            }
        });
        from_args.or_else(|| {
            env.iter()
                .rev()
                .find(|(k, _)| *k == env_name)
                .map(|(_, v)| *v == "true")
        })
    };
    let mut values = Vec::new();
    let mut set = |on: bool, value: &str| {
        if on {
            values.push(value.to_string());
        }
    };
    set(
        flag("--secrets", "RELOADLET_CONTROLLER_SECRETS") == Some(true),
        "controller.secrets=true",
    );
    set(
        flag("--env-consumers", "RELOADLET_ENV_CONSUMERS") == Some(false),
        "controller.envConsumers=false",
    );
    set(
        flag("--env-consumers-secrets", "RELOADLET_ENV_CONSUMERS_SECRETS") == Some(true),
        "controller.envConsumersSecrets=true",
    );
    set(
        flag("--rollout", "RELOADLET_ROLLOUT") == Some(false),
        "controller.rollout.enabled=false",
    );
    set(
        flag("--argo-rollouts", "RELOADLET_ARGO_ROLLOUTS") == Some(true),
        "controller.rollout.argoRollouts=true",
    );
    set(
        flag("--reloader-compat", "RELOADLET_RELOADER_COMPAT") == Some(true),
        "controller.reloaderCompat=true",
    );
    values.sort();
    values
}

impl Node {
    /// Loads the chart's RBAC for these values into the API server (panics when
    /// `hack/render-rbac.sh` renders no such combination).
    pub fn load_chart_rbac(&self, values: &[String]) {
        let policy = rbac_chart::policy(values).unwrap_or_else(|| {
            panic!(
                "nodesim/fixtures/rbac-chart.json has no render for {values:?}: add it to hack/render-rbac.sh's combinations and run it"
            )
        });
        self.api.set_rbac(policy);
    }

    /// A kubeconfig of the agent's service account (the chart's), or the admin's when
    /// [`Node::rbac`] is off.
    pub fn agent_kubeconfig(&self) -> PathBuf {
        self.service_account_kubeconfig(rbac_chart::AGENT)
    }

    /// A kubeconfig of the controller's service account, or the admin's.
    pub fn controller_kubeconfig(&self) -> PathBuf {
        self.service_account_kubeconfig(rbac_chart::CONTROLLER)
    }

    fn service_account_kubeconfig(&self, (ns, name): (&str, &str)) -> PathBuf {
        if !self.rbac {
            return self.kubeconfig();
        }
        self.kubeconfig_for(ns, name)
            .expect("write a service account's kubeconfig")
    }

    /// At the end of a test: fails it on any 403 it did not declare, and appends the rule
    /// entries used to the coverage file.
    pub(super) fn finish_rbac(&self) {
        write_used(&self.api.used_rules());
        if std::thread::panicking() {
            return;
        }
        let unexpected = self.api.unexpected_forbidden();
        if !unexpected.is_empty() {
            let list: Vec<String> = unexpected.iter().map(|f| format!("  {f}")).collect();
            panic!(
                "the API server answered 403s the test did not expect (declare them with node.api.expect_forbidden, or fix the RBAC in deploy/):\n{}",
                list.join("\n")
            );
        }
    }
}

/// `target/rbac-used` (next to cargo's `CARGO_TARGET_TMPDIR`), or `RELOADLET_RBAC_USED_DIR`.
fn used_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RELOADLET_RBAC_USED_DIR") {
        return PathBuf::from(dir);
    }
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(&tmp).join("rbac-used")
}

/// One line per rule entry: user, role, verb, group, resource, resourceNames (tabs).
fn write_used(used: &[nodesim::apiserver::UsedRule]) {
    if used.is_empty() {
        return;
    }
    let dir = used_dir();
    let exe = std::env::current_exe().ok();
    let binary = exe
        .as_deref()
        .and_then(|p| p.file_stem())
        .and_then(|s| s.to_str())
        .map(|s| {
            s.rsplit_once('-')
                .map_or(s, |(name, _hash)| name)
                .to_string()
        })
        .unwrap_or_default();
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .replace("::", "-");
    let text: String = used
        .iter()
        .map(|u| {
            format!(
                "{}\t{}\t{}\t{}\t{}\t{}\n",
                u.user, u.role, u.entry.verb, u.entry.group, u.entry.resource, u.entry.names
            )
        })
        .collect();
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("{binary}--{test}.txt")))?
            .write_all(text.as_bytes())
    });
    if let Err(e) = written {
        eprintln!(
            "cannot record the RBAC rules used in {}: {e}",
            dir.display()
        );
    }
}
