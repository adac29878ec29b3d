"""Kubernetes resource quantities parsed exactly, converted with kube's rounding.

The grammar is apimachinery's: ``<sign><digits>[.<digits>]<suffix>`` where the suffix is a
binary SI unit (Ki..Ei), a decimal SI unit (m, k, M..E) or a decimal exponent (e3, E-2),
scanned the way apimachinery's parser scans it. Values are held as ``Fraction``; kube rounds
a parsed amount up to a whole nano unit, then up (away from zero) to the unit of the
resource (milli-CPU for ``cpu``, whole units for everything else).
"""

from __future__ import annotations

import functools
from fractions import Fraction

from scheduler.core.decode import shown

__all__ = [
    "QuantityError",
    "format_milli",
    "is_extended_resource",
    "parse_quantity",
    "resource_value",
    "to_units",
]


class QuantityError(ValueError):
    """A quantity string that is not valid Kubernetes quantity syntax."""


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
# kube caps every quantity's magnitude at the largest int64, in the quantity's own units.
_MAX_AMOUNT = Fraction(2**63 - 1)
_NANO = 10**9
# Go's unicode.IsSpace, which strings.TrimSpace uses.
_GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + ("\u2028\u2029\u202f\u205f\u3000")
)
_FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def _split(text: str) -> tuple[bool, str, str, str]:
    """apimachinery's parseQuantityString: (negative, numerator, fraction digits, suffix).

    Its quirks are kept: leading zeros are skipped, an empty numerator is zero (so ``.5``,
    ``1.``, and even ``.`` or a lone sign parse), and the suffix is letters from
    ``eEinumkKMGTP`` followed by an optional sign and digits.
    """
    end = len(text)
    pos = 0
    negative = False
    if pos < end and text[pos] in "+-":
        negative = text[pos] == "-"
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return negative, "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(f"{_FORMAT_WRONG}, got {shown(text)}")
    return negative, num, denom, text[suffix_start:]


def _go_int(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64)."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or any(c not in _DIGITS for c in digits):
        return None
    significant = digits.lstrip("0") or "0"
    if len(significant) > 19:  # beyond int64 (and int() refuses thousands of digits)
        return None
    value = -int(significant) if text[:1] == "-" else int(significant)
    return value if -(2**63) <= value < 2**63 else None


def _scale(text: str, suffix: str) -> tuple[int, int]:
    """The factor a suffix stands for, as (multiplier, power of ten): binary SI, decimal SI,
    or a decimal exponent."""
    if suffix in _DECIMAL:
        return 1, _DECIMAL[suffix]
    if suffix in _BINARY:
        return _BINARY[suffix], 0
    if len(suffix) > 1 and suffix[0] in "eE":
        exponent = _go_int(suffix[1:])
        if exponent is not None:
            return 1, (exponent + 2**31) % 2**32 - 2**31  # kube keeps it as an int32
    raise QuantityError(f"unable to parse quantity's suffix, got {shown(text)}")


_KEPT_DIGITS = 120
"""Significant digits read exactly; the rest only say whether the value lies above them. The
last kept digit is then far below a nano unit for any value under the cap, so the rounding
comes out as from all the digits (and reading them costs nothing, however many)."""


def _amount(digits: str, point: int, multiplier: int, power: int) -> Fraction:
    """int(digits) / 10^(len(digits) - point) * multiplier * 10^power, rounded up to a nano
    unit and capped as kube rounds and caps it (non-negative)."""
    significant = digits.lstrip("0")
    if not significant:
        return Fraction(0)
    exponent = point - len(digits) + power
    if len(significant) > _KEPT_DIGITS:
        rest = significant[_KEPT_DIGITS:]
        significant, exponent = significant[:_KEPT_DIGITS], exponent + len(rest)
        if rest.strip("0"):  # a stand-in strictly between the kept digits and the next step
            significant, exponent = significant + "1", exponent - 1
    magnitude = len(significant) + exponent  # 10^(magnitude-1) <= value / multiplier < 10^magnitude
    if magnitude > 40:  # over 10^39: beyond the cap
        return _MAX_AMOUNT
    if magnitude < -40:  # under 10^-40 * 2^60: under one nano unit, not zero
        return Fraction(1, _NANO)
    amount = Fraction(int(significant) * multiplier) * Fraction(10) ** exponent
    return min(Fraction(_round_up(amount * _NANO), _NANO), _MAX_AMOUNT)


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def _round_up(value: Fraction) -> int:
    """Round to an integer away from zero, as kube's RoundUp does."""
    return _ceil(value) if value >= 0 else -_ceil(-value)


_CACHED_LENGTH = 32
"""Short quantity strings are parsed once (a cluster repeats `100m`, `64Mi`, `8` endlessly);
longer ones, rare and possibly hostile, are not kept."""


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity (``"100m"``, ``"1.5Gi"``, ``"1e3"``, ``2``) into an exact fraction.

    As kube does, a non-zero amount is rounded up (away from zero) to a whole nano unit and
    its magnitude capped at 2^63-1 units.
    """
    if type(value) is str and len(value) <= _CACHED_LENGTH:
        return _parse_short(value)
    return _parse(value)


@functools.lru_cache(maxsize=4096)
def _parse_short(value: str) -> Fraction:
    return _parse(value)  # a Fraction is immutable: safe to share; errors are not cached


def _parse(value: str | int | float) -> Fraction:
    if isinstance(value, bool):
        raise QuantityError(f"quantities must be strings or numbers, not {shown(value)}")
    if isinstance(value, int):
        value = str(value)
    elif isinstance(value, float):
        # YAML turns `cpu: 0.5` into a float; its shortest repr is what the user wrote.
        value = repr(value)
    if not isinstance(value, str):
        raise QuantityError(f"quantities must be strings or numbers, not {type(value).__name__}")
    # The API server's Quantity.UnmarshalJSON trims white space before parsing.
    text = value.strip(_GO_SPACE)
    if not text:
        raise QuantityError(f"{_FORMAT_WRONG}, got {shown(value)}")
    negative, num, denom, suffix = _split(text)
    amount = _amount(num + denom, len(num), *_scale(text, suffix))
    return -amount if negative else amount


def to_units(name: str, quantity: Fraction) -> int:
    """An exact amount in kube's integer unit for the resource: milli-CPU for ``cpu``, units
    for the rest, rounded up (away from zero, like kube's MilliValue and Value)."""
    return _round_up(quantity * 1000) if name == "cpu" else _round_up(quantity)


def resource_value(name: str, value: str | int | float) -> int:
    """The integer kube schedules with for one quantity (see `to_units`)."""
    return to_units(name, parse_quantity(value))


def format_milli(millis: int) -> str:
    """Render milli-CPU the way kubectl does: ``500m``, ``2``."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def is_extended_resource(name: str) -> bool:
    """kube's IsExtendedResourceName: a `domain/name` outside the kubernetes.io domain (such
    as `nvidia.com/gpu`), never cpu, memory, pods, ephemeral-storage or hugepages-<size>.
    Pods and nodes may only hold whole units of it."""
    native = "/" not in name or "kubernetes.io/" in name
    return not native and not name.startswith("requests.")
