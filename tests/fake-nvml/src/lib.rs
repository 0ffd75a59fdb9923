//! Fake libnvidia-ml (placeholder).
