"""TPU prices per chip-hour and the cost arithmetic built on them.

Every rate lives in `DEFAULT_PRICE_ENTRIES` (dated, with its source) or in a deployment's
`PRICES=` override in `tpu.env`; no other module holds a rate. An override is a JSON list of
entries (or `{"entries": [...]}`; any other shape is refused) merged over the defaults: an entry with the same
(accelerator, region, provisioning model) replaces the default, a new key is added.

    PRICES=[{"accelerator":"v5e","region":"us-west4","provisioning_model":"spot",
             "usd_per_chip_hour":0.55,"as_of":"2026-03-01","source":"our billing export"}]
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_settings import NoDecode
from typing_extensions import Annotated

ProvisioningModel = Literal["on-demand", "flex-start", "spot"]
PROVISIONING_MODELS: tuple[str, ...] = ("on-demand", "flex-start", "spot")

# The TPU API names slices by family ("v5litepod-1"); prices are published per generation ("v5e").
_GENERATION_OF_FAMILY = {"v5litepod": "v5e", "v5e": "v5e", "v6e": "v6e"}


def generation_of(accelerator: str) -> str:
    """`v5litepod-1`, `v5litepod` or `v5e` -> `v5e`; unknown names pass through lowercased."""
    name = accelerator.strip().lower()
    family = name.rsplit("-", 1)[0] if name.rsplit("-", 1)[-1].isdigit() else name
    return _GENERATION_OF_FAMILY.get(family, family)


def region_of(zone_or_region: str) -> str:
    """`us-west4-a` -> `us-west4`; a region passes through."""
    parts = zone_or_region.strip().lower().split("-")
    return "-".join(parts[:2]) if len(parts) >= 3 else "-".join(parts)


class PriceEntry(BaseModel):
    """One rate: USD per chip-hour for a generation, region and provisioning model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    accelerator: str = Field(description="TPU generation, e.g. v5e (v5litepod-1 is accepted)")
    region: str = Field(description="GCP region, e.g. us-west4 (a zone is accepted)")
    provisioning_model: ProvisioningModel
    usd_per_chip_hour: float = Field(ge=0, allow_inf_nan=False)  # JSON's Infinity (or 1e400) is no price
    as_of: date = Field(description="when the source was read")
    source: str = Field(min_length=1, description="where the number comes from")

    @field_validator("accelerator")
    @classmethod
    def _generation(cls, value: str) -> str:
        return generation_of(value)

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        return region_of(value)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.accelerator, self.region, self.provisioning_model)


# What users can check themselves: the public pricing page and the Cloud Billing Catalog's SKUs.
# These rates were read from a third-party note quoting the catalog (no v5e price was read on
# Google's page itself), so the source says so; PRICES in tpu.env replaces them with your own.
PRICING_PAGE = "https://cloud.google.com/tpu/pricing"
_CATALOG_NOTE = f"Cloud Billing Catalog, v5e in us-west4, as quoted by a third party; check {PRICING_PAGE}"
_READ_ON = date(2026, 11, 29)  # when that reference was read into this project
DEFAULT_PRICE_ENTRIES: tuple[PriceEntry, ...] = (
    PriceEntry(
        accelerator="v5e",
        region="us-west4",
        provisioning_model="on-demand",
        usd_per_chip_hour=1.20,
        as_of=_READ_ON,
        source=_CATALOG_NOTE,
    ),
    PriceEntry(
        accelerator="v5e",
        region="us-west4",
        provisioning_model="flex-start",
        usd_per_chip_hour=0.60,
        as_of=_READ_ON,
        source=_CATALOG_NOTE + " (SKU 'DWS Defined Duration V5e'; Google publishes flex-start as up to 53% "
        "off on-demand)",
    ),
    PriceEntry(
        accelerator="v5e",
        region="us-west4",
        provisioning_model="spot",
        usd_per_chip_hour=0.5779,
        as_of=_READ_ON,
        source=_CATALOG_NOTE + " (SKU 'TpuV5e attached to Spot Preemptible VMs')",
    ),
)


class PriceNotFound(LookupError):
    pass


class PriceTable(BaseModel):
    model_config = ConfigDict(frozen=True)

    entries: tuple[PriceEntry, ...] = DEFAULT_PRICE_ENTRIES

    def get(self, accelerator: str, region: str, provisioning_model: str) -> PriceEntry:
        key = (generation_of(accelerator), region_of(region), provisioning_model)
        for entry in self.entries:
            if entry.key == key:
                return entry
        known = ", ".join("/".join(e.key) for e in self.entries)
        raise PriceNotFound(
            f"no price for {'/'.join(key)}; known: {known}. Add it to PRICES in tpu.env "
            '(a JSON list of {"accelerator","region","provisioning_model","usd_per_chip_hour","as_of","source"})'
        )

    def estimate(self, accelerator: str, region: str, provisioning_model: str) -> tuple[PriceEntry, str]:
        """The region's rate, or — for a bill after the fact, never a budget check — the highest
        known rate of the same generation and model elsewhere, with a note saying so (empty when
        exact). Raises PriceNotFound when the generation and model are priced nowhere."""
        try:
            return self.get(accelerator, region, provisioning_model), ""
        except PriceNotFound:
            generation, model = generation_of(accelerator), provisioning_model
            known = [e for e in self.entries if e.accelerator == generation and e.provisioning_model == model]
            if not known:
                raise
        entry = max(known, key=lambda e: e.usd_per_chip_hour)
        return entry, (f"estimated at {entry.region}'s rate: no {region_of(region)} price in the table "
                       "(add it to PRICES in tpu.env)")

    def merged(self, overrides: "PriceTable | list[PriceEntry] | tuple[PriceEntry, ...]") -> "PriceTable":
        """Entries of `overrides` replace same-key entries here; new keys are appended."""
        new = overrides.entries if isinstance(overrides, PriceTable) else tuple(overrides)
        by_key = {entry.key: entry for entry in self.entries}
        for entry in new:
            by_key[entry.key] = entry
        return PriceTable(entries=tuple(by_key.values()))

    def __str__(self) -> str:
        # `tpubot config` prints settings with str(); keep it one readable line.
        return "; ".join(f"{'/'.join(e.key)} {hourly(e.usd_per_chip_hour, 'chip-hour')}" for e in self.entries)


# One entry of the PRICES setting as it is written (bot/cli/errors.py shows it when an entry is wrong).
ENTRY_EXAMPLE = ('{"accelerator": "v5e", "region": "us-west4", "provisioning_model": "flex-start", '
                 '"usd_per_chip_hour": 0.6, "as_of": "2026-11-29", "source": "Cloud Billing Catalog"}')


def default_price_table() -> PriceTable:
    return PriceTable()


SHAPE = f"write it as a JSON list of entries, like PRICES='[{ENTRY_EXAMPLE}]'"


def _shape_error(what: str) -> ValueError:
    # Starts with the variable's name: bot/cli/errors.py then prints the message as it is, on one line.
    return ValueError(f"PRICES {what}; {SHAPE}")


def _described(value: Any) -> str:
    return json.dumps(value)[:80] if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__


def merge_over_defaults(value: Any) -> Any:
    """Before-validator for the `prices` setting: JSON text, a list of entries, `{"entries": [...]}`
    or one entry -> the default table with those entries merged over it. Any other shape is refused:
    a value that was read but ignored left the default rates in force while `tpubot config` said PRICES
    came from the environment."""
    if isinstance(value, PriceTable):
        return value
    if isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        try:
            value = json.loads(text) if text.strip() else []
        except json.JSONDecodeError as error:
            raise _shape_error(f"is not valid JSON ({error})") from None
    if isinstance(value, dict):
        fields = set(PriceEntry.model_fields)
        if set(value) == {"entries"}:
            value = value["entries"]
            if not isinstance(value, (list, tuple)):
                raise _shape_error(f'has "entries": {_described(value)}, not a list of entries')
        elif set(value) & fields:
            value = [value]  # one entry: its own fields say what is wrong with it, if anything
        else:
            keys = ", ".join(sorted(map(str, value))) or "none"
            raise _shape_error(f"is a JSON object with keys {keys[:120]}, neither an entry nor "
                               '{"entries": [...]}')
    if not isinstance(value, (list, tuple)):
        raise _shape_error(f"is {_described(value)}, not a list of entries")
    for number, entry in enumerate(value, start=1):
        if not isinstance(entry, (dict, PriceEntry)):
            raise _shape_error(f"entry {number} is {_described(entry)}, not a JSON object")
    overrides = [entry if isinstance(entry, PriceEntry) else PriceEntry.model_validate(entry) for entry in value]
    return default_price_table().merged(overrides)


# The type of `Settings.prices`: whatever tpu.env holds is merged over the defaults. NoDecode: the text
# reaches merge_over_defaults as written, which decodes it; decoded by pydantic-settings, `null` became
# None, which it drops, so PRICES=null left the defaults in force without a word.
PriceTableSetting = Annotated[PriceTable, NoDecode, BeforeValidator(merge_over_defaults)]


# --- money, as people read it ---------------------------------------------------------------


UNKNOWN_AMOUNT = "an unknown amount"  # what a sum that is not a number (inf, NaN) is written as
HUGE_USD = 1e12  # from here on, cents (and a float's last digits) are noise: the figure is written as 1.23e+15
TINY_USD = 0.000001  # below a millionth of a dollar (a v5e chip's few milliseconds), written "<$0.000001"


def money(usd: float) -> str:
    """One way to write an amount everywhere (cards, receipts, budgets, the CLI): cents from ten
    cents up (`$0.60`, `$1,234.00`), tenths of a cent below (`$0.089`, a batch's dollars per million
    tokens), and below a tenth of a cent its first two digits (`$0.00071`: seconds of TPU still read
    as something, not as $0.00), never in exponent notation; under a millionth of a dollar `<$0.000001`.
    What arithmetic on a bad figure can give reads as what it is: -0.0 (and a negative float
    rounding error under a hundredth of a cent) is `$0.00`, a sum past a trillion dollars
    `$1.00e+15`, and inf or NaN UNKNOWN_AMOUNT, never `$nan`."""
    if not math.isfinite(usd):
        return UNKNOWN_AMOUNT
    if -TINY_USD < usd <= 0:
        return "$0.00"
    sign, usd = ("-", -usd) if usd < 0 else ("", usd)
    if usd >= HUGE_USD:
        return f"{sign}${usd:.2e}"
    if usd < TINY_USD:
        return f"<${TINY_USD:f}"
    if float(f"{usd:.3f}") >= 0.1:  # 0.0999 rounds to ten cents: written in cents, not as $0.100
        return f"{sign}${usd:,.2f}"
    if float(f"{usd:.2g}") >= 0.001:
        return f"{sign}${usd:.3f}"
    return f"{sign}${Decimal(f'{usd:.2g}'):f}"  # two significant digits, written out: $0.00071, not $7.1e-04


def hourly(usd_per_hour: float, unit: str = "h") -> str:
    """A rate: `$0.60/h`, `$0.5779/chip-hour` — cents at least, and no digit of a published price lost.
    A rate that is not a number is "an unknown rate"; one past a trillion dollars is written as money() does."""
    if not math.isfinite(usd_per_hour):
        return "an unknown rate"
    if abs(usd_per_hour) >= HUGE_USD:
        return f"{money(usd_per_hour)}/{unit}"
    sign = "-" if usd_per_hour < 0 and f"{usd_per_hour:.4f}".strip("-0.") else ""
    digits = f"{abs(usd_per_hour):,.4f}".rstrip("0")
    whole, _, cents = digits.partition(".")
    return f"{sign}${whole}.{cents.ljust(2, '0')}/{unit}"


# --- cost arithmetic ------------------------------------------------------------------------

Rate = PriceEntry | float  # a PriceEntry or a bare USD per chip-hour (e.g. one read from a table)


def _usd_per_chip_hour(price: Rate) -> float:
    return price.usd_per_chip_hour if isinstance(price, PriceEntry) else float(price)


def cost_for(price: Rate, duration: timedelta, *, chips: int = 1) -> float:
    hours = max(duration.total_seconds(), 0.0) / 3600
    return _usd_per_chip_hour(price) * chips * hours


def cost_so_far(price: Rate, start: datetime, now: datetime, *, chips: int = 1) -> float:
    """What the lease has cost from `start` to `now` (0 before it starts)."""
    return cost_for(price, now - start, chips=chips)


def cost_to_deadline(price: Rate, now: datetime, deadline: datetime, *, chips: int = 1) -> float:
    """What the rest of the lease will cost if it runs until `deadline` (flex-start bills until
    the VMs are deleted at maxRunDuration, so this is the remaining commitment)."""
    return cost_for(price, deadline - now, chips=chips)


def usd_per_million_output_tokens(price: Rate, output_tokens_per_second: float, *, chips: int = 1) -> float:
    """Cost of a million generated tokens when the slice sustains this output throughput."""
    if output_tokens_per_second <= 0:
        raise ValueError("output throughput must be positive")
    usd_per_second = _usd_per_chip_hour(price) * chips / 3600
    return usd_per_second / output_tokens_per_second * 1_000_000


def output_throughput_for(price: Rate, usd_per_million: float, *, chips: int = 1) -> float:
    """The inverse: the output tokens/s at which a million tokens cost `usd_per_million`."""
    if usd_per_million <= 0:
        raise ValueError("cost per million tokens must be positive")
    return _usd_per_chip_hour(price) * chips / 3600 / usd_per_million * 1_000_000
