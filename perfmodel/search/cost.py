"""Money: what GPU time costs, from a rental price or a purchase price amortised over a lifetime.

All prices are per GPU (a server's price divided by its GPUs, including its share of network,
power and hosting if the user wants those counted). Costs are in the user's currency; perfmodel
never supplies a price of its own.

Amortisation (straight-line, no cost of capital)::

    price_per_gpu_hour = purchase_price / (lifetime_years * 8766 h * utilization)

with 8766 hours per year (365.25 days). ``utilization`` is the fraction of the lifetime the GPU
does paid work; at 0.5 each useful hour carries two hours of depreciation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel.errors import ConfigError
from perfmodel.units import hour

HOURS_PER_YEAR = 365.25 * 24.0


@dataclass(frozen=True)
class Pricing:
    """Price of one GPU-hour.

    Examples
    --------
    >>> Pricing(price_per_gpu_hour=2.0).cost(gpus=8, time_s=3600.0)
    16.0
    >>> round(Pricing.amortised(purchase_price=26298.0, lifetime_years=3.0).price_per_gpu_hour, 4)
    1.0
    """

    price_per_gpu_hour: float
    source: str = "price per GPU-hour"

    def __post_init__(self) -> None:
        p = self.price_per_gpu_hour
        if not (isinstance(p, int | float) and math.isfinite(p) and p >= 0):
            raise ConfigError(
                f"price per GPU-hour must be >= 0, got {p!r}", value=p, where="--price-per-gpu-hour"
            )

    @classmethod
    def amortised(
        cls, purchase_price: float, lifetime_years: float, utilization: float = 1.0
    ) -> Pricing:
        """Straight-line depreciation of a purchase price per GPU over its useful lifetime."""
        if not (purchase_price >= 0 and math.isfinite(purchase_price)):
            raise ConfigError(
                f"purchase price must be >= 0, got {purchase_price!r}",
                value=purchase_price,
                where="--purchase-price",
            )
        if not (lifetime_years > 0 and math.isfinite(lifetime_years)):
            raise ConfigError(
                f"lifetime must be > 0 years, got {lifetime_years!r}",
                value=lifetime_years,
                where="--lifetime-years",
            )
        if not (0 < utilization <= 1):
            raise ConfigError(
                f"utilization must be in (0, 1], got {utilization!r}",
                value=utilization,
                where="--utilization",
            )
        return cls(
            purchase_price / (lifetime_years * HOURS_PER_YEAR * utilization),
            source=f"purchase {purchase_price:g} per GPU over {lifetime_years:g} years at {utilization:.0%} use",
        )

    @property
    def price_per_gpu_s(self) -> float:
        return self.price_per_gpu_hour / hour

    def cost(self, gpus: int, time_s: float) -> float:
        """``gpus * time_s * price_per_gpu_s``."""
        return gpus * time_s * self.price_per_gpu_s


def parse_prices(text: str | None, systems: list[str], *, where: str) -> dict[str, float]:
    """``"2.5"`` (all systems) or ``"2.5,1.2,3"`` (one per system, in order) -> ``{system: value}``."""
    if text is None:
        return {}
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    try:
        values = [float(t) for t in items]
    except ValueError as exc:
        raise ConfigError(
            f"{where}: {text!r} is not a number or comma list of numbers", value=text, where=where
        ) from exc
    if len(values) == 1:
        values = values * len(systems)
    if len(values) != len(systems):
        raise ConfigError(
            f"{where}: {len(values)} values for {len(systems)} systems; give one value or one per system",
            value=text,
            where=where,
        )
    return dict(zip(systems, values))
