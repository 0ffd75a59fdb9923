//! SPANK plugin (placeholder until the plugin lands).
