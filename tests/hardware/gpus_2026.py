"""The GPUs appended to the catalogue for issue 25 (the hardware people buy in 2026)."""

GPUS_2026 = (
    "B300-SXM-288GB",
    "GB200-186GB",
    "GB300-288GB",
    "RTX-5090",
    "RTX-PRO-6000-BLACKWELL",
    "L4",
    "L40",
    "A10G",
    "H20-96GB",
    "MI300X",
    "MI325X",
    "MI355X",
)
