//! STUB (replaced by the os-proc branch).
use crate::model::{ContainerId, ReloadSignal};
use std::path::PathBuf;
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MainProcess {
    pub pid: i32,
    pub start_time: u64,
}
#[derive(Debug, thiserror::Error)]
#[error("stub")]
pub struct ProcessError;
pub trait ContainerProcesses: Send + Sync {
    fn find_main_process(
        &self,
        pod_uid: &str,
        container: &ContainerId,
    ) -> Result<MainProcess, ProcessError>;
    fn signal_container(
        &self,
        pod_uid: &str,
        container: &ContainerId,
        signal: ReloadSignal,
    ) -> Result<i32, ProcessError>;
}
pub struct ProcFs;
impl ProcFs {
    pub fn new(_proc_root: impl Into<PathBuf>) -> Self {
        ProcFs
    }
}
impl ContainerProcesses for ProcFs {
    fn find_main_process(&self, _: &str, _: &ContainerId) -> Result<MainProcess, ProcessError> {
        unimplemented!()
    }
    fn signal_container(
        &self,
        _: &str,
        _: &ContainerId,
        _: ReloadSignal,
    ) -> Result<i32, ProcessError> {
        unimplemented!()
    }
}
