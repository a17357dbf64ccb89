//! agent-watchdog's compiled OTLP decode. [`wire`] is pure Rust (fuzzed on its own:
//! `native/otlp/fuzz`); the `python` feature adds the Python module
//! `watchdog.core.spans._native` over it.

pub mod wire;

#[cfg(feature = "python")]
mod python;

#[cfg(feature = "python")]
mod kernels;

#[cfg(feature = "python")]
mod normalise;

#[cfg(feature = "python")]
mod model_calls;

#[cfg(feature = "python")]
mod failures;

#[cfg(feature = "python")]
mod answers;

#[cfg(feature = "python")]
mod agents;

#[cfg(feature = "python")]
mod signatures;

#[cfg(feature = "python")]
mod briefs;
