//! Why the provider could not publish, and the exit code each reason gets.

use cder_model::ConfigError;

/// Why the provider could not publish. Each variant says what failed and
/// where, and maps to the CLI exit code of design.md.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The provider's config (or the node config it reads) is wrong.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The input is inconsistent or cannot be published as asked.
    #[error("{0}")]
    Input(String),
    /// cderd, the LRMS or the device inventory failed or gave unusable data.
    #[error("{0}")]
    Runtime(String),
}

impl ProviderError {
    /// 2 for bad input, 1 for a runtime failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            ProviderError::Config(_) | ProviderError::Input(_) => 2,
            ProviderError::Runtime(_) => 1,
        }
    }
}
