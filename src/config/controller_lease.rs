//! Where the controller's Lease is — the controller that grants `action: restart`
//! (docs/restart.md, "Without a controller"). The agent reads it while a restart request
//! waits; `reloadlet explain` reads it for a restart pod. One set of flags for both.

/// The controller's leader-election Lease (`--leader-elect`): the name the controller holds
/// and the agent and `explain` read.
pub const LEASE_NAME: &str = "reloadlet-controller";

#[derive(clap::Args, Clone, Debug)]
pub struct ControllerLeaseArgs {
    /// `action: restart`: the namespace of the controller's Lease, read to tell whether a
    /// controller grants restarts (the agent: Warning `RestartUncoordinated` while a request
    /// waits and none holds it). Default: the agent's own namespace (`POD_NAMESPACE`), where
    /// the chart and the kustomize install run the controller (`explain`: else the
    /// ServiceAccount's namespace, else `reloadlet-system`).
    #[arg(long, env = "RELOADLET_CONTROLLER_LEASE_NAMESPACE")]
    pub controller_lease_namespace: Option<String>,
    /// The name of that Lease (the controller's `--leader-elect` Lease); empty: not read.
    #[arg(long, env = "RELOADLET_CONTROLLER_LEASE", default_value = LEASE_NAME)]
    pub controller_lease: String,
}

impl ControllerLeaseArgs {
    /// `(namespace, name)` of the Lease when both are known (`default_namespace`: where it is
    /// when the flag does not say).
    pub fn target(self, default_namespace: Option<String>) -> Option<(String, String)> {
        let namespace = self
            .controller_lease_namespace
            .or(default_namespace)
            .filter(|n| !n.is_empty())?;
        (!self.controller_lease.is_empty()).then_some((namespace, self.controller_lease))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(namespace: Option<&str>, name: &str) -> ControllerLeaseArgs {
        ControllerLeaseArgs {
            controller_lease_namespace: namespace.map(str::to_owned),
            controller_lease: name.to_owned(),
        }
    }

    #[test]
    fn the_lease_is_read_only_when_its_namespace_and_name_are_known() {
        let own = || Some("reloadlet-system".to_owned());
        let cases = [
            (
                args(None, LEASE_NAME),
                own(),
                Some(("reloadlet-system", LEASE_NAME)),
            ),
            (args(Some("ops"), "l"), own(), Some(("ops", "l"))),
            (args(None, LEASE_NAME), None, None),
            (args(Some(""), LEASE_NAME), own(), None),
            (args(None, ""), own(), None),
        ];
        for (a, default, want) in cases {
            let want = want.map(|(n, l)| (n.to_owned(), l.to_owned()));
            assert_eq!(a.clone().target(default), want, "{a:?}");
        }
    }
}
