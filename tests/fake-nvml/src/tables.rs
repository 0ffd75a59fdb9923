//! The fake's own MIG tables: GPU models, GPU instance profiles, their placements and
//! the compute instance profiles each offers, per driver generation.
//!
//! Kept independent of `colloc_core::mig` on purpose: the fake is the test oracle, so a
//! mistake copied from one table into the other would go unnoticed (core's tests compare
//! the two). Every model and figure names its source next to it. Where sources disagree
//! by driver version (H100 NVL: 46.12/92.62 GiB with one driver, 46.38/93.12 with
//! another), the rows are the newer reading; a real node's driver answers for itself.
//!
//! Sources, cited below by their tag:
//! - [guide]: NVIDIA Multi-Instance GPU User Guide (R580), "Supported MIG Profiles" (names,
//!   slices, instance counts, engines) and "Concepts" (placements).
//! - [h200]: what NVML answered on the lent H200, driver 580.159.04, MIG off
//!   (shared/gpu-facts.md).
//! - [lgip-h100]: `nvidia-smi mig -lgip` of an H100 80GB HBM3 (jbarrow.ai field notes on
//!   MIG): 9.75/19.62/39.50/79.25 GiB, SMs 16/26/32/60/64/132.
//! - [lgip-h100pcie]: `nvidia-smi mig -lgip` of an H100 PCIe, driver 570.169 (a public
//!   MIG how-to): same memory as the SXM card, SMs 14/14/30/46/62/114.
//! - [lgip-h100nvl]: `nvidia-smi mig -lgip` of an H100 NVL (NVIDIA/gpu-operator#900,
//!   NVIDIA/mig-parted#101): 10.75/21.62/46.38/93.12 GiB.
//! - [smi-a100]: `nvidia-smi` MIG device tables of A100-SXM4-40GB and -80GB cards in
//!   public issue threads (e.g. NVIDIA/DCGM#152, XuehaiPan/nvitop#8): 4864/9856/19968 MiB
//!   on the 40GB card, 9728/19968 MiB on the 80GB card; issue 16 quotes the 40GB `-lgip`
//!   (4.75/9.62/19.50/39.25 GiB).
//! - [go-nvml]: NVIDIA/go-nvml `pkg/nvml/mock/shared/gpus/{a100,a30}.go` (NVIDIA's own
//!   mock): A100-80GB 3g/4g/7g memory, the A30 rows. A mock, not a driver reading.
//! - [nvml.h]: NVML API 13 (nvml-wrapper-sys 0.10 bindings, generated from it) and the
//!   R535 nvml.h (CUDA 12.2, NVIDIA/go-nvml `pkg/nvml/nvml.h`): profile index macros,
//!   `NVML_GPU_INSTANCE_PROFILE_COUNT` 0xA in R535 and 0x11 in API 13.
//! - [issue16]: the project's issue 16, from mig-parted, k8s-device-plugin, DRA driver,
//!   DCGM and go-nvml#146 threads.
//! - [mig-parted]: NVIDIA/mig-parted `deployments/systemd/config-default.yaml` (profile
//!   names per GPU: GH200 96GB and 144G, B200).
//! - [lgip-gh200]: `nvidia-smi mig -lgip` of a GH200 480GB (96 GB HBM3; Grace Hopper
//!   install logs in a public repository): 11.00/23.00/46.50/93.00 GiB, SMs
//!   16/26/32/60/64/132.
//! - [lgip-gh200-144]: `nvidia-smi mig -lgip` of a GH200 144G HBM3e (NVIDIA/mig-parted#139):
//!   17.50/35.25 GiB, SMs 16/26/32 (the reading found stops at 2g); total 146831 MiB
//!   (`nvidia-smi --query-gpu`, driver 580.173).
//! - [lgip-b200]: `nvidia-smi mig -lgip` of a B200 (NVIDIA/mig-parted#166 and #187; the
//!   later shows 1g at 20.50 GiB instead of 22.00, as NVIDIA/gpu-operator#2155's MIG
//!   device table does), 1g.45gb/2g.45gb 44.25 GiB, SMs 18/30/36; total 183359 MiB.
//! - [create]: where the driver puts an instance created without a placement: the
//!   guide's `nvidia-smi mig -cgi` examples and field logs, collected with their
//!   placements in `fixtures/documented-mig-models.json` (`default_placement`).
//!
//! `fixtures/documented-mig-models.json` holds the documented figures of every model as
//! expected values; `tests/models.rs` holds these tables to them (and core's tests hold
//! core's to the same file). Figures no reading confirmed are marked there and below.

/// GPU architecture: decides how MIG mode changes and whether profiles answer with MIG off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// A100, A30: a mode change needs a GPU reset, done by the driver when the GPU is
    /// idle; the mode is kept in the InfoROM across reboots; profile queries answer
    /// NOT_SUPPORTED with MIG off ([guide] "Enable MIG Mode", [nvml.h]).
    Ampere,
    /// H100, H200, GH200 (and the B200, which this fake lets answer as Hopper does: the
    /// guide's no-reset rule covers Hopper and later): a mode change takes effect at once
    /// without a reset and is lost on driver reload or reboot ([guide] "Enable MIG
    /// Mode"); profiles and placements answer with MIG off ([h200]).
    Hopper,
}

/// Which media engines a GPU instance profile takes, for the all-media rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// The usual share.
    Standard,
    /// All media engines of the GPU (`+me.all`, NVML_GPU_INSTANCE_PROFILE_*_ALL_ME): only
    /// instances without media engines may exist beside it ([issue16]).
    All,
}

/// One GPU instance profile as NVML describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiProfile {
    /// NVML profile index (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub index: u32,
    /// NVML profile id (`nvmlGpuInstanceProfileInfo_t.id`).
    pub id: u32,
    /// Name without the `MIG ` prefix.
    pub name: &'static str,
    /// Compute slices.
    pub slices: u32,
    /// Most instances of this profile at once.
    pub instances: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Copy engines.
    pub copy_engines: u32,
    /// Video decoders.
    pub decoders: u32,
    /// JPEG engines.
    pub jpegs: u32,
    /// Optical flow accelerators.
    pub ofas: u32,
    /// Placement starts (memory slots).
    pub starts: &'static [u32],
    /// Placement size (memory slots).
    pub size: u32,
    /// Media engines it takes.
    pub media: Media,
    /// First driver generation that lists it (535 for the long-standing ones).
    pub since_driver: u32,
}

/// A GPU model the fake can pretend to be.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    /// Short alias used in `COLLOC_FAKE_NVML_GPUS`.
    pub alias: &'static str,
    /// Name as `nvmlDeviceGetName` reports it.
    pub name: &'static str,
    /// Architecture.
    pub family: Family,
    /// Total memory in MiB, as `nvmlDeviceGetMemoryInfo` reports it.
    pub memory_mib: u64,
    /// Memory slots of the placement space.
    pub mem_slots: u32,
    /// Compute slices.
    pub compute_slices: u32,
    /// Its GPU instance profiles (for the newest driver; see [`Model::profile_by_index`]).
    pub profiles: &'static [GiProfile],
}

/// Engines (copy engines, decoders, JPEG, OFA).
type Engines = (u32, u32, u32, u32);

#[allow(clippy::too_many_arguments)]
const fn p(
    index: u32,
    id: u32,
    name: &'static str,
    slices: u32,
    instances: u32,
    memory_mib: u64,
    sms: u32,
    engines: Engines,
    starts: &'static [u32],
    size: u32,
) -> GiProfile {
    GiProfile {
        index,
        id,
        name,
        slices,
        instances,
        memory_mib,
        sms,
        copy_engines: engines.0,
        decoders: engines.1,
        jpegs: engines.2,
        ofas: engines.3,
        starts,
        size,
        media: Media::Standard,
        since_driver: 535,
    }
}

/// An all-media profile ([nvml.h] API 13 has NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME = 15,
/// 2_SLICE_ALL_ME = 16; [issue16] said R580 lists them). The H200 probe refuted that for
/// Hopper: driver 580.159.04 answered NOT_SUPPORTED for both indexes
/// (fixtures/h200-r580-mig-off.root.json), so these are listed only when the state's
/// `all_media` is on (a card and driver that offer them). The ids are this fake's own (65
/// is what an RTX PRO 6000 reports for its `+me.all`).
const fn all_me(base: GiProfile, index: u32, id: u32, name: &'static str) -> GiProfile {
    GiProfile {
        index,
        id,
        name,
        instances: 1,
        decoders: 7,
        jpegs: 7,
        ofas: 1,
        media: Media::All,
        since_driver: 580,
        ..base
    }
}

// Placements in an 8-slot placement space ([guide] "Concepts"; [h200] for Hopper):
const ONE: &[u32] = &[0, 1, 2, 3, 4, 5, 6]; // 1-slice profiles, size 1
const ONE_DOUBLE: &[u32] = &[0, 2, 4, 6]; // 1-slice double-memory profile, size 2
const TWO: &[u32] = &[0, 2, 4]; // 2g, size 2
const THREE: &[u32] = &[0, 4]; // 3g, size 4
const AT0: &[u32] = &[0]; // 4g (size 4) and 7g (size 8)
                          // The A30's 4-slot space ([guide], [go-nvml]):
const A30_ONE: &[u32] = &[0, 1, 2, 3];
const A30_TWO: &[u32] = &[0, 2];

/// A100 40GB (SXM4 and PCIe share the tables, [guide]): memory [smi-a100], SMs and
/// engines [smi-a100]/[go-nvml].
const A100_40GB: &[GiProfile] = &[
    p(0, 19, "1g.5gb", 1, 7, 4864, 14, (1, 0, 0, 0), ONE, 1),
    p(1, 14, "2g.10gb", 2, 3, 9856, 28, (2, 1, 0, 0), TWO, 2),
    p(2, 9, "3g.20gb", 3, 2, 19968, 42, (3, 2, 0, 0), THREE, 4),
    p(3, 5, "4g.20gb", 4, 1, 19968, 56, (4, 2, 0, 0), AT0, 4),
    p(4, 0, "7g.40gb", 7, 1, 40192, 98, (7, 5, 1, 1), AT0, 8),
    p(7, 20, "1g.5gb+me", 1, 1, 4864, 14, (1, 1, 1, 1), ONE, 1),
    p(
        9,
        15,
        "1g.10gb",
        1,
        4,
        9856,
        14,
        (1, 1, 0, 0),
        ONE_DOUBLE,
        2,
    ),
];

/// A100 80GB (SXM4 and PCIe): 1g/2g memory [smi-a100] (9728, 19968), 3g/4g/7g [go-nvml]
/// (40192, 40192, 80384).
const A100_80GB: &[GiProfile] = &[
    p(0, 19, "1g.10gb", 1, 7, 9728, 14, (1, 0, 0, 0), ONE, 1),
    p(1, 14, "2g.20gb", 2, 3, 19968, 28, (2, 1, 0, 0), TWO, 2),
    p(2, 9, "3g.40gb", 3, 2, 40192, 42, (3, 2, 0, 0), THREE, 4),
    p(3, 5, "4g.40gb", 4, 1, 40192, 56, (4, 2, 0, 0), AT0, 4),
    p(4, 0, "7g.80gb", 7, 1, 80384, 98, (7, 5, 1, 1), AT0, 8),
    p(7, 20, "1g.10gb+me", 1, 1, 9728, 14, (1, 1, 1, 1), ONE, 1),
    p(
        9,
        15,
        "1g.20gb",
        1,
        4,
        19968,
        14,
        (1, 1, 0, 0),
        ONE_DOUBLE,
        2,
    ),
];

/// A30 24GB: names, counts and engines [guide] (2g.12gb+me since R525); memory, SMs and
/// placements [go-nvml]; ids as NVML numbers a 4-slice GPU's profiles (14, 21, 5, 6, 0:
/// the RTX PRO 6000's `-lgip` in GoogleCloudPlatform/container-engine-accelerators#564
/// uses the same numbering for its 4-slot space).
const A30: &[GiProfile] = &[
    p(0, 14, "1g.6gb", 1, 4, 5836, 14, (1, 0, 0, 0), A30_ONE, 1),
    p(1, 5, "2g.12gb", 2, 2, 11672, 28, (2, 2, 0, 0), A30_TWO, 2),
    p(3, 0, "4g.24gb", 4, 1, 23344, 56, (4, 4, 1, 1), AT0, 4),
    p(7, 21, "1g.6gb+me", 1, 1, 5836, 14, (1, 1, 1, 1), A30_ONE, 1),
    p(
        8,
        6,
        "2g.12gb+me",
        2,
        1,
        11672,
        28,
        (2, 2, 1, 1),
        A30_TWO,
        2,
    ),
];

/// H100 80GB HBM3 (SXM5) [lgip-h100].
const H100_SXM_1G: GiProfile = p(0, 19, "1g.10gb", 1, 7, 9984, 16, (1, 1, 1, 0), ONE, 1);
const H100_SXM_2G: GiProfile = p(1, 14, "2g.20gb", 2, 3, 20096, 32, (2, 2, 2, 0), TWO, 2);
const H100_SXM: &[GiProfile] = &[
    H100_SXM_1G,
    H100_SXM_2G,
    p(2, 9, "3g.40gb", 3, 2, 40448, 60, (3, 3, 3, 0), THREE, 4),
    p(3, 5, "4g.40gb", 4, 1, 40448, 64, (4, 4, 4, 0), AT0, 4),
    p(4, 0, "7g.80gb", 7, 1, 81152, 132, (8, 7, 7, 1), AT0, 8),
    p(7, 20, "1g.10gb+me", 1, 1, 9984, 16, (1, 1, 1, 1), ONE, 1),
    p(
        9,
        15,
        "1g.20gb",
        1,
        4,
        20096,
        26,
        (1, 1, 1, 0),
        ONE_DOUBLE,
        2,
    ),
    all_me(H100_SXM_1G, 15, 65, "1g.10gb+me.all"),
    all_me(H100_SXM_2G, 16, 66, "2g.20gb+me.all"),
];

/// H100 PCIe [lgip-h100pcie] (114 SMs in all).
const H100_PCIE_1G: GiProfile = p(0, 19, "1g.10gb", 1, 7, 9984, 14, (1, 1, 1, 0), ONE, 1);
const H100_PCIE_2G: GiProfile = p(1, 14, "2g.20gb", 2, 3, 20096, 30, (2, 2, 2, 0), TWO, 2);
const H100_PCIE: &[GiProfile] = &[
    H100_PCIE_1G,
    H100_PCIE_2G,
    p(2, 9, "3g.40gb", 3, 2, 40448, 46, (3, 3, 3, 0), THREE, 4),
    p(3, 5, "4g.40gb", 4, 1, 40448, 62, (4, 4, 4, 0), AT0, 4),
    p(4, 0, "7g.80gb", 7, 1, 81152, 114, (8, 7, 7, 1), AT0, 8),
    p(7, 20, "1g.10gb+me", 1, 1, 9984, 14, (1, 1, 1, 1), ONE, 1),
    p(
        9,
        15,
        "1g.20gb",
        1,
        4,
        20096,
        14,
        (1, 1, 1, 0),
        ONE_DOUBLE,
        2,
    ),
    all_me(H100_PCIE_1G, 15, 65, "1g.10gb+me.all"),
    all_me(H100_PCIE_2G, 16, 66, "2g.20gb+me.all"),
];

/// H100 NVL 94GB [lgip-h100nvl].
const H100_NVL_1G: GiProfile = p(0, 19, "1g.12gb", 1, 7, 11008, 16, (1, 1, 1, 0), ONE, 1);
const H100_NVL_2G: GiProfile = p(1, 14, "2g.24gb", 2, 3, 22144, 32, (2, 2, 2, 0), TWO, 2);
const H100_NVL: &[GiProfile] = &[
    H100_NVL_1G,
    H100_NVL_2G,
    p(2, 9, "3g.47gb", 3, 2, 47488, 60, (3, 3, 3, 0), THREE, 4),
    p(3, 5, "4g.47gb", 4, 1, 47488, 64, (4, 4, 4, 0), AT0, 4),
    p(4, 0, "7g.94gb", 7, 1, 95360, 132, (8, 7, 7, 1), AT0, 8),
    p(7, 20, "1g.12gb+me", 1, 1, 11008, 16, (1, 1, 1, 1), ONE, 1),
    p(
        9,
        15,
        "1g.24gb",
        1,
        4,
        22144,
        26,
        (1, 1, 1, 0),
        ONE_DOUBLE,
        2,
    ),
    all_me(H100_NVL_1G, 15, 65, "1g.12gb+me.all"),
    all_me(H100_NVL_2G, 16, 66, "2g.24gb+me.all"),
];

/// H200 141GB [h200]. The H200 NVL has the same profiles [guide]; its memory figures
/// here are the SXM card's, not read on an NVL.
const H200_1G: GiProfile = p(0, 19, "1g.18gb", 1, 7, 16384, 16, (1, 1, 1, 0), ONE, 1);
const H200_2G: GiProfile = p(1, 14, "2g.35gb", 2, 3, 33280, 32, (2, 2, 2, 0), TWO, 2);
const H200: &[GiProfile] = &[
    H200_1G,
    H200_2G,
    p(2, 9, "3g.71gb", 3, 2, 71424, 60, (3, 3, 3, 0), THREE, 4),
    p(3, 5, "4g.71gb", 4, 1, 71424, 64, (4, 4, 4, 0), AT0, 4),
    p(4, 0, "7g.141gb", 7, 1, 143360, 132, (8, 7, 7, 1), AT0, 8),
    p(7, 20, "1g.18gb+me", 1, 1, 16384, 16, (1, 1, 1, 1), ONE, 1),
    p(
        9,
        15,
        "1g.35gb",
        1,
        4,
        33280,
        26,
        (1, 1, 1, 0),
        ONE_DOUBLE,
        2,
    ),
    all_me(H200_1G, 15, 65, "1g.18gb+me.all"),
    all_me(H200_2G, 16, 66, "2g.35gb+me.all"),
];

/// GH200 96GB ("NVIDIA GH200 480GB", the H100 96GB of the guide) [lgip-gh200], names
/// [guide]/[mig-parted].
const GH200_96: &[GiProfile] = &[
    p(0, 19, "1g.12gb", 1, 7, 11264, 16, (1, 1, 1, 0), ONE, 1),
    p(1, 14, "2g.24gb", 2, 3, 23552, 32, (2, 2, 2, 0), TWO, 2),
    p(2, 9, "3g.48gb", 3, 2, 47616, 60, (3, 3, 3, 0), THREE, 4),
    p(3, 5, "4g.48gb", 4, 1, 47616, 64, (4, 4, 4, 0), AT0, 4),
    p(4, 0, "7g.96gb", 7, 1, 95232, 132, (8, 7, 7, 1), AT0, 8),
    p(7, 20, "1g.12gb+me", 1, 1, 11264, 16, (1, 1, 1, 1), ONE, 1),
    p(
        9,
        15,
        "1g.24gb",
        1,
        4,
        23552,
        26,
        (1, 1, 1, 0),
        ONE_DOUBLE,
        2,
    ),
];

/// GH200 144G HBM3e: 1g, 1g.36gb and 2g [lgip-gh200-144]. NOT CONFIRMED: 3g/4g/7g memory
/// and SMs (no reading found): memory estimated as the H200's share of its 7g, the 7g
/// as the total less the H200's margin; SMs as the H200's (same GH100).
const GH200_144: &[GiProfile] = &[
    p(0, 19, "1g.18gb", 1, 7, 17920, 16, (1, 1, 1, 0), ONE, 1),
    p(1, 14, "2g.36gb", 2, 3, 36096, 32, (2, 2, 2, 0), TWO, 2),
    p(2, 9, "3g.72gb", 3, 2, 72960, 60, (3, 3, 3, 0), THREE, 4),
    p(3, 5, "4g.72gb", 4, 1, 72960, 64, (4, 4, 4, 0), AT0, 4),
    p(4, 0, "7g.144gb", 7, 1, 146432, 132, (8, 7, 7, 1), AT0, 8),
    p(7, 20, "1g.18gb+me", 1, 1, 17920, 16, (1, 1, 1, 1), ONE, 1),
    p(
        9,
        15,
        "1g.36gb",
        1,
        4,
        36096,
        26,
        (1, 1, 1, 0),
        ONE_DOUBLE,
        2,
    ),
];

/// B200 180GB: 1g, 1g.45gb, 2g [lgip-b200] (1g memory of the later driver), names and
/// counts [guide]. NOT CONFIRMED: 3g/4g/7g memory (estimated: twice the 2g plus 256 MiB as
/// on the H100; the 7g as the total less ~575 MiB) and SMs (go-nvml's mock: 54/72/126);
/// placements from the guide's 8-slot fractions (no `-lgipp` reading found); engines
/// as the guide's table (2/3/6/8/16 copy engines).
const B200: &[GiProfile] = &[
    p(0, 19, "1g.23gb", 1, 7, 20992, 18, (2, 1, 1, 0), ONE, 1),
    p(1, 14, "2g.45gb", 2, 3, 45312, 36, (3, 1, 1, 0), TWO, 2),
    p(2, 9, "3g.90gb", 3, 2, 90880, 54, (6, 1, 1, 0), THREE, 4),
    p(3, 5, "4g.90gb", 4, 1, 90880, 72, (8, 1, 1, 0), AT0, 4),
    p(4, 0, "7g.180gb", 7, 1, 182784, 126, (16, 1, 1, 1), AT0, 8),
    p(7, 20, "1g.23gb+me", 1, 1, 20992, 18, (2, 1, 1, 1), ONE, 1),
    p(
        9,
        15,
        "1g.45gb",
        1,
        4,
        45312,
        30,
        (2, 1, 1, 0),
        ONE_DOUBLE,
        2,
    ),
];

const fn model(
    alias: &'static str,
    name: &'static str,
    family: Family,
    memory_mib: u64,
    profiles: &'static [GiProfile],
) -> Model {
    Model {
        alias,
        name,
        family,
        memory_mib,
        mem_slots: 8,
        compute_slices: 7,
        profiles,
    }
}

/// The A30: four memory slots and four compute slices ([guide]).
const fn four_slice(m: Model) -> Model {
    Model {
        mem_slots: 4,
        compute_slices: 4,
        ..m
    }
}

/// All models, with the names NVML reports ([guide] "Supported GPUs"; total memory as
/// `nvidia-smi` shows it in the sources above, [h200] for the H200).
pub static MODELS: &[Model] = &[
    model(
        "A100-40GB",
        "NVIDIA A100-SXM4-40GB",
        Family::Ampere,
        40960,
        A100_40GB,
    ),
    model(
        "A100-PCIE-40GB",
        "NVIDIA A100-PCIE-40GB",
        Family::Ampere,
        40960,
        A100_40GB,
    ),
    model(
        "A100-80GB",
        "NVIDIA A100-SXM4-80GB",
        Family::Ampere,
        81920,
        A100_80GB,
    ),
    model(
        "A100-80GB-PCIE",
        "NVIDIA A100 80GB PCIe",
        Family::Ampere,
        81920,
        A100_80GB,
    ),
    four_slice(model("A30", "NVIDIA A30", Family::Ampere, 24576, A30)),
    model(
        "H100-80GB",
        "NVIDIA H100 80GB HBM3",
        Family::Hopper,
        81559,
        H100_SXM,
    ),
    model(
        "H100-PCIE",
        "NVIDIA H100 PCIe",
        Family::Hopper,
        81559,
        H100_PCIE,
    ),
    model(
        "H100-NVL",
        "NVIDIA H100 NVL",
        Family::Hopper,
        95830,
        H100_NVL,
    ),
    model("H200", "NVIDIA H200", Family::Hopper, 143771, H200),
    model("H200-NVL", "NVIDIA H200 NVL", Family::Hopper, 143771, H200),
    model(
        "GH200-96GB",
        "NVIDIA GH200 480GB",
        Family::Hopper,
        97871,
        GH200_96,
    ),
    model(
        "GH200-144GB",
        "NVIDIA GH200 144G HBM3e",
        Family::Hopper,
        146831,
        GH200_144,
    ),
    model("B200", "NVIDIA B200", Family::Hopper, 183359, B200),
];

/// Driver generations the fake can answer as.
pub const DRIVERS: &[u32] = &[535, 550, 570, 580];

/// Driver version strings it reports per generation (580: the lent H200's).
pub fn driver_version(driver: u32) -> &'static str {
    match driver {
        535 => "535.216.03",
        550 => "550.127.08",
        570 => "570.172.08",
        _ => "580.159.04",
    }
}

/// `NVML_GPU_INSTANCE_PROFILE_COUNT` of a driver generation: indexes at or past it answer
/// INVALID_ARGUMENT ([nvml.h]: 0xA in R535; 0x11 in API 13). R550 is taken as R535 (it
/// added no profile macro this fake models); R570 as listing the GFX and no-media
/// indexes 10–14 (an assumption: the first Blackwell driver).
pub fn gi_profile_count(driver: u32) -> u32 {
    match driver {
        ..=550 => 10,
        551..=579 => 15,
        _ => 17,
    }
}

/// `NVML_COMPUTE_INSTANCE_PROFILE_COUNT`: 8 ([nvml.h], 0..7 with 1_SLICE_REV1 = 7); R580
/// adds a ninth, index 8 ([issue16]).
pub fn ci_profile_count(driver: u32) -> u32 {
    if driver >= 580 {
        9
    } else {
        8
    }
}

/// A model by alias or NVML name (case-insensitive).
pub fn model_named(name: &str) -> Option<&'static Model> {
    let name = name.trim();
    MODELS
        .iter()
        .find(|m| m.alias.eq_ignore_ascii_case(name) || m.name.eq_ignore_ascii_case(name))
}

impl Model {
    /// Profiles this driver generation lists.
    pub fn listed(&self, driver: u32) -> impl Iterator<Item = &'static GiProfile> {
        self.profiles
            .iter()
            .filter(move |p| p.since_driver <= driver && p.index < gi_profile_count(driver))
    }
    /// Profile by NVML profile index, as this driver generation lists it.
    pub fn profile_by_index(&self, index: u32, driver: u32) -> Option<&'static GiProfile> {
        self.listed(driver).find(|p| p.index == index)
    }
    /// Profile by NVML profile id, as this driver generation lists it.
    pub fn profile_by_id(&self, id: u32, driver: u32) -> Option<&'static GiProfile> {
        self.listed(driver).find(|p| p.id == id)
    }
    /// Profile by name (without `MIG `), any driver generation.
    pub fn profile_by_name(&self, name: &str) -> Option<&'static GiProfile> {
        self.profiles.iter().find(|p| p.name == name)
    }
}

impl GiProfile {
    /// Possible placements `(start, size)`, as the driver lists them.
    pub fn placements(&self) -> Vec<(u32, u32)> {
        self.starts.iter().map(|&s| (s, self.size)).collect()
    }
}

/// The GPU instance id the driver gives an instance at this placement: ids follow the
/// placement, not the order of creation ([issue16]: 7g→0, 4g→1, 3g→1/2, 2g at slot
/// s→3+s/2, 1g at slot s→7+s). As a formula: the instances of one size tile the slot
/// space, numbered after all larger sizes.
pub fn gi_id_for(mem_slots: u32, start: u32, size: u32) -> u32 {
    let size = size.max(1);
    mem_slots / size - 1 + start / size
}

/// The memory slots a placement takes, as a bit mask.
fn slot_mask(start: u32, size: u32) -> u64 {
    if size == 0 || start + size > 64 {
        return 0;
    }
    ((1u64 << size) - 1) << start
}

/// Where the driver puts a GPU instance of `prof` created without a placement
/// (`nvmlDeviceCreateGpuInstance`), given the memory slots already taken (`used`) and the
/// profiles the GPU lists with how many instances of each exist (`listed`): of the free
/// placements, the one that spoils the fewest placements a later instance could still
/// take (of every profile not yet at its instance limit), the lowest start on a tie.
///
/// NVIDIA does not publish the rule. This one reproduces every documented creation
/// order [create]: two 3g at 4 then 0; seven 1g at 6, 4, 5, 0, 1, 2, 3 (A100, H100 PCIe,
/// H100 NVL); a 2g first at 4, then 1g at 6, 0, 1, 2, 3; after 1g at 6 and 4 a 2g at 0.
/// "Highest free slot first" does not: the guide's driver put the second 1g at 4, not 5,
/// and that 2g at 0, not 2.
pub fn driver_placement<'a>(
    prof: &GiProfile,
    listed: impl Iterator<Item = (&'a GiProfile, u32)>,
    used: u64,
) -> Option<(u32, u32)> {
    let open: Vec<u64> = listed
        .filter(|(p, made)| *made < p.instances)
        .flat_map(|(p, _)| p.placements())
        .map(|(s, z)| slot_mask(s, z))
        .filter(|m| used & m == 0)
        .collect();
    prof.placements()
        .into_iter()
        .filter(|&(s, z)| used & slot_mask(s, z) == 0)
        .min_by_key(|&(s, z)| {
            let taken = slot_mask(s, z);
            let spoiled = open.iter().filter(|m| *m & taken != 0).count();
            (spoiled, s)
        })
}

/// A compute instance profile: `(index = id, slices)` for the CI profile index, or `None`
/// for an index the driver knows but this fake's GPUs never offer (8 and 6 slices).
pub fn ci_profile_slices(index: u32) -> Option<u32> {
    match index {
        0 => Some(1),
        1 => Some(2),
        2 => Some(3),
        3 => Some(4),
        4 => Some(7),
        7 => Some(1), // 1_SLICE_REV1
        8 => Some(2), // R580's ninth profile: two slices, second revision
        _ => None,
    }
}

/// Does a GPU instance of `gi_slices` slices offer CI profile `ci_index` ([guide] "CI
/// profiles"; Hopper 2g instances also offer the revised 1-slice profile 7, and with
/// R580 the revised 2-slice profile 8 [issue16])?
pub fn ci_offered(family: Family, driver: u32, gi_slices: u32, ci_index: u32) -> bool {
    match (ci_index, gi_slices) {
        (7, 2) => family == Family::Hopper,
        (8, 2) => family == Family::Hopper && driver >= 580,
        (7 | 8, _) => false,
        (i, _) => {
            let Some(s) = ci_profile_slices(i) else {
                return false;
            };
            match gi_slices {
                7 => matches!(s, 1 | 2 | 3 | 4 | 7),
                4 => matches!(s, 1 | 2 | 4),
                3 => matches!(s, 1..=3),
                2 => matches!(s, 1 | 2),
                1 => s == 1,
                _ => false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_has_the_standard_profiles_in_range() {
        for m in MODELS {
            let idx: Vec<u32> = m.listed(535).map(|p| p.index).collect();
            if m.alias == "A30" {
                assert_eq!(idx, [0, 1, 3, 7, 8], "{}", m.alias);
            } else {
                assert_eq!(idx, [0, 1, 2, 3, 4, 7, 9], "{}", m.alias);
            }
            for p in m.profiles {
                // Placements stay in the slot space, a profile never has more instances
                // than placements, and ids never collide between sizes.
                let pl = p.placements();
                assert!(pl.iter().all(|(s, z)| s + z <= m.mem_slots), "{}", p.name);
                assert!(pl.len() as u32 >= p.instances, "{} {}", m.alias, p.name);
                assert!(p.memory_mib < m.memory_mib, "{} {}", m.alias, p.name);
                assert!(p.slices <= m.compute_slices);
            }
        }
        assert_eq!(model_named("h200").unwrap().name, "NVIDIA H200");
        assert_eq!(
            model_named("NVIDIA A100 80GB PCIe").unwrap().alias,
            "A100-80GB-PCIE"
        );
        assert!(model_named("V100").is_none());
    }

    #[test]
    fn h200_matches_what_the_card_reported() {
        let m = model_named("H200").unwrap();
        let row = |i| {
            let p = m.profile_by_index(i, 580).unwrap();
            (p.id, p.name, p.slices, p.instances, p.memory_mib, p.sms)
        };
        assert_eq!(row(0), (19, "1g.18gb", 1, 7, 16384, 16));
        assert_eq!(row(7), (20, "1g.18gb+me", 1, 1, 16384, 16));
        assert_eq!(row(9), (15, "1g.35gb", 1, 4, 33280, 26));
        assert_eq!(row(1), (14, "2g.35gb", 2, 3, 33280, 32));
        assert_eq!(row(2), (9, "3g.71gb", 3, 2, 71424, 60));
        assert_eq!(row(3), (5, "4g.71gb", 4, 1, 71424, 64));
        assert_eq!(row(4), (0, "7g.141gb", 7, 1, 143360, 132));
        for i in [5, 6, 8, 10, 11, 12, 13, 14] {
            assert!(m.profile_by_index(i, 580).is_none(), "index {i}");
        }
        let pl = |i| m.profile_by_index(i, 580).unwrap().placements();
        assert_eq!(pl(9), [(0, 2), (2, 2), (4, 2), (6, 2)]);
        assert_eq!(pl(1), [(0, 2), (2, 2), (4, 2)]);
        assert_eq!(pl(2), [(0, 4), (4, 4)]);
        assert_eq!(pl(3), [(0, 4)]);
        assert_eq!(pl(4), [(0, 8)]);
        assert_eq!(pl(0).len(), 7);
    }

    #[test]
    fn driver_generations_list_what_they_know() {
        let h = model_named("H100-80GB").unwrap();
        assert!(h.profile_by_index(15, 570).is_none());
        assert_eq!(h.profile_by_index(15, 580).unwrap().media, Media::All);
        assert_eq!(gi_profile_count(535), 10);
        assert_eq!(gi_profile_count(580), 17);
        assert_eq!(ci_profile_count(570), 8);
        assert_eq!(ci_profile_count(580), 9);
    }

    #[test]
    fn gi_ids_follow_the_placement() {
        // 7g→0, 4g→1, 3g→1/2, 2g at s→3+s/2, 1g at s→7+s (8 slots).
        assert_eq!(gi_id_for(8, 0, 8), 0);
        assert_eq!(gi_id_for(8, 0, 4), 1);
        assert_eq!(gi_id_for(8, 4, 4), 2);
        assert_eq!([0, 2, 4, 6].map(|s| gi_id_for(8, s, 2)), [3, 4, 5, 6]);
        assert_eq!(gi_id_for(8, 0, 1), 7);
        assert_eq!(gi_id_for(8, 6, 1), 13);
        // A30: 4g→0, 2g→1/2, 1g→3..6.
        assert_eq!(gi_id_for(4, 0, 4), 0);
        assert_eq!(gi_id_for(4, 2, 2), 2);
        assert_eq!(gi_id_for(4, 3, 1), 6);
    }

    #[test]
    fn compute_instance_profiles_per_family() {
        assert!(ci_offered(Family::Hopper, 535, 2, 7));
        assert!(!ci_offered(Family::Ampere, 580, 2, 7));
        assert!(!ci_offered(Family::Hopper, 570, 2, 8));
        assert!(ci_offered(Family::Hopper, 580, 2, 8));
        assert!(ci_offered(Family::Ampere, 535, 7, 3));
        assert!(!ci_offered(Family::Ampere, 535, 3, 3));
        assert!(!ci_offered(Family::Ampere, 535, 7, 5));
    }
}
