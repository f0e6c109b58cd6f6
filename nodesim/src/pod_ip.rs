//! Pod IPs of the simulated node. On a real node the CNI plugin gives the pod sandbox its
//! address; the runtime reports it in the CRI `PodSandboxStatus.Network.Ip` and the kubelet
//! copies it to `status.podIP` / `status.podIPs` (kubernetes
//! `pkg/kubelet/kuberuntime/kuberuntime_sandbox.go`, `determinePodSandboxIPs`, and
//! `pkg/kubelet/kubelet_pods.go`, `generateAPIPodStatus` / `sortPodIPs`); a `hostNetwork`
//! pod gets the node's IP there instead.
//!
//! The simulated pods share the host's network namespace, so each gets its own address on
//! the loopback range 127.0.0.0/8 (every address of it reaches `lo` on Linux): a test server
//! bound to a pod's IP stands in for that pod's endpoint, and a request to another pod's IP
//! does not reach it.

use std::net::Ipv4Addr;

/// The node's own address (`status.hostIP`, and `status.podIP` of hostNetwork pods).
pub const HOST_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

/// Hands out 127.1.0.1, 127.1.0.2, … (never `.0` or `.255`), one per pod, never reused
/// while the node runs.
#[derive(Debug, Default)]
pub struct PodIps {
    handed_out: u32,
}

impl PodIps {
    pub fn allocate(&mut self) -> Ipv4Addr {
        loop {
            self.handed_out += 1;
            let n = (127u32 << 24) + (1 << 16) + self.handed_out;
            let ip = Ipv4Addr::from(n);
            let last = ip.octets()[3];
            if last != 0 && last != 255 && ip.octets()[1] != 0 {
                return ip;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_loopback_and_never_the_host() {
        let mut ips = PodIps::default();
        let all: Vec<Ipv4Addr> = (0..600).map(|_| ips.allocate()).collect();
        assert_eq!(all[0], Ipv4Addr::new(127, 1, 0, 1));
        let distinct: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
        assert!(all
            .iter()
            .all(|ip| ip.is_loopback() && *ip != HOST_IP && ip.octets()[3] % 255 != 0));
    }
}
