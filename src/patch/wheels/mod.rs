//! The `wheels` kind: locked wheels installed as pip would, one layer per patch. Data side:
//! [`lock`] (PEP 751), [`filename`] (wheel file names), [`tags`] (platform tags, choice),
//! [`target`] (what one platform offers), [`requires`] (METADATA, markers, requirement checks).

pub mod filename;
pub mod lock;
pub mod requires;
pub mod tags;
pub mod target;
