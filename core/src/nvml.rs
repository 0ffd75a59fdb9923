//! GPU control over libnvidia-ml (nvml-wrapper): placeholder until the NVML layer lands.
