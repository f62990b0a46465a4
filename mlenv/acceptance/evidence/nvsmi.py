"""``nvidia-smi -q -x``: each GPU's identity and health, read without privilege.

What fleet health checks read from NVML (Azure's node health checks, NVIDIA's own
guidance on row remapping): the GPU's UUID and model, its PCIe link's current generation
and width against what the link can reach, ECC uncorrectable counts (volatile: since the
driver loaded; aggregate: the GPU's life), row remapping (a pending remap needs a GPU
reset; a failed one means the GPU is to be replaced) and the clock event (throttle)
reasons active now.

Both schema generations are read: drivers before 535 name the throttle reasons
``clocks_throttle_reasons``/``clocks_throttle_reason_*``, later ones
``clocks_event_reasons``/``clocks_event_reason_*``; ``remapped_rows`` is ``N/A`` on GPUs
without row remapping (before Ampere) and in MIG mode. Tested on captured outputs
(tests/data/nvidia-smi/README.md names each one's source).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

ARGV = ["nvidia-smi", "-q", "-x"]

# Reasons that mean the GPU slowed itself because something is wrong with it or its
# cooling/power delivery (NVML: HW slowdown "engaged due to high temperature, power brake,
# etc."), against those that are policy or idleness.
FAILING_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
WARNING_REASONS = ("sw_thermal_slowdown",)
# Idle, application clocks, display clocks, sync boost and the software power cap (the board
# at its power limit under a heavy kernel is normal) are not faults.


class NvsmiParseError(ValueError):
    """The text is not ``nvidia-smi -q -x`` output."""


@dataclass(frozen=True)
class GpuState:
    """One GPU as ``nvidia-smi -q -x`` describes it (None: the field is N/A or absent)."""

    index: int  # position in nvidia-smi's list (its ``-i`` index)
    bus_id: str
    name: str
    uuid: str
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None  # what this link can reach (GPU and host side)
    pcie_gen_device_max: int | None = None  # the GPU's own maximum (newer drivers)
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    ecc_enabled: bool | None = None
    ecc_volatile_uncorrectable: int | None = None
    ecc_aggregate_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    remap_uncorrectable: int | None = None
    clock_events_active: tuple[str, ...] = field(default_factory=tuple)

    def failing_clock_events(self) -> list[str]:
        """Active reasons that mean the GPU throttles itself (hardware slowdown, power brake)."""
        return [r for r in self.clock_events_active if r in FAILING_REASONS]

    def warning_clock_events(self) -> list[str]:
        """Active reasons worth a warning (software thermal slowdown)."""
        return [r for r in self.clock_events_active if r in WARNING_REASONS]


@dataclass(frozen=True)
class NvsmiLog:
    """The whole output: driver version and the GPUs in nvidia-smi's order."""

    driver_version: str
    attached_gpus: int
    gpus: tuple[GpuState, ...]


def _text(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    x = el.find(path)
    if x is None or x.text is None:
        return None
    t = x.text.strip()
    return None if t in ("", "N/A", "[N/A]", "Unknown Error") else t


def _int(el: ET.Element | None, path: str) -> int | None:
    t = _text(el, path)
    if t is None:
        return None
    m = re.match(r"^(\d+)", t)  # "16x", "0", "4"
    return int(m.group(1)) if m else None


def _yes(el: ET.Element | None, path: str) -> bool | None:
    t = _text(el, path)
    return None if t is None else t.lower() == "yes"


def _uncorrectable(ecc: ET.Element | None, which: str) -> int | None:
    """Sum of every ``*uncorrectable*`` counter under ``ecc_errors/<which>`` (DRAM and SRAM;
    the SRAM split into parity/SECDED on newer drivers), None when all are N/A."""
    if ecc is None:
        return None
    sec = ecc.find(which)
    if sec is None:
        return None
    vals = [_int(sec, c.tag) for c in sec if "uncorrectable" in c.tag]
    got = [v for v in vals if v is not None]
    return sum(got) if got else None


def _clock_events(gpu: ET.Element) -> tuple[str, ...]:
    for section, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        sec = gpu.find(section)
        if sec is None:
            continue
        return tuple(
            c.tag.removeprefix(prefix)
            for c in sec
            if c.tag.startswith(prefix) and (c.text or "").strip() == "Active"
        )
    return ()


def parse(text: str) -> NvsmiLog:
    """Parse ``nvidia-smi -q -x``. Raises NvsmiParseError when it is not that output, or
    when a GPU has no UUID (every judgement here is keyed by it)."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise NvsmiParseError(f"not XML: {e}") from None
    if root.tag != "nvidia_smi_log":
        raise NvsmiParseError(f"root element is <{root.tag}>, expected <nvidia_smi_log>")
    gpus: list[GpuState] = []
    for i, g in enumerate(root.findall("gpu")):
        uuid = _text(g, "uuid")
        if not uuid:
            raise NvsmiParseError(f"GPU {i} ({g.get('id', '?')}) has no <uuid>")
        link = g.find("pci/pci_gpu_link_info")
        ecc = g.find("ecc_errors")
        remap = g.find("remapped_rows")
        gpus.append(
            GpuState(
                index=i,
                bus_id=g.get("id", "") or (_text(g, "pci/pci_bus_id") or ""),
                name=_text(g, "product_name") or "",
                uuid=uuid,
                pcie_gen_current=_int(link, "pcie_gen/current_link_gen"),
                pcie_gen_max=_int(link, "pcie_gen/max_link_gen"),
                pcie_gen_device_max=_int(link, "pcie_gen/max_device_link_gen"),
                pcie_width_current=_int(link, "link_widths/current_link_width"),
                pcie_width_max=_int(link, "link_widths/max_link_width"),
                ecc_enabled=(
                    None
                    if _text(g, "ecc_mode/current_ecc") is None
                    else _text(g, "ecc_mode/current_ecc") == "Enabled"
                ),
                ecc_volatile_uncorrectable=_uncorrectable(ecc, "volatile"),
                ecc_aggregate_uncorrectable=_uncorrectable(ecc, "aggregate"),
                remap_pending=_yes(remap, "remapped_row_pending"),
                remap_failure=_yes(remap, "remapped_row_failure"),
                remap_uncorrectable=_int(remap, "remapped_row_unc"),
                clock_events_active=_clock_events(g),
            )
        )
    return NvsmiLog(
        driver_version=_text(root, "driver_version") or "",
        attached_gpus=_int(root, "attached_gpus") or len(gpus),
        gpus=tuple(gpus),
    )


def same_uuid(a: str, b: str) -> bool:
    """True when two GPU UUIDs name the same GPU (torch prints them without ``GPU-``)."""

    def norm(u: str) -> str:
        return u.strip().lower().removeprefix("gpu-")

    return bool(a.strip()) and norm(a) == norm(b)
