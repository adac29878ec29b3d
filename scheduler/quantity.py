"""Kubernetes resource quantities parsed exactly, converted with kube's rounding.

The grammar is apimachinery's: ``<sign><digits>[.<digits>]<suffix>`` where the suffix is a
binary SI unit (Ki..Ei), a decimal SI unit (m, k, M..E) or a decimal exponent (e3, E-2).
Values are held as ``Fraction`` so nothing is lost before the one rounding kube does: up,
to the unit of the resource (milli-CPU for ``cpu``, whole units for everything else).
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["QuantityError", "format_milli", "parse_quantity", "resource_value"]


class QuantityError(ValueError):
    """A quantity string that is not valid Kubernetes quantity syntax."""


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-])?(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?\d+)|(?P<decimal>[numkMGTPE]?))$"
)
# Exponents beyond this are not representable by kube's int64-based quantities either.
_MAX_EXPONENT = 64


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity (``"100m"``, ``"1.5Gi"``, ``"1e3"``, ``2``) into an exact fraction."""
    if isinstance(value, bool):
        raise QuantityError(f"quantities must be strings or numbers, not {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        # YAML turns `cpu: 0.5` into a float; its shortest repr is what the user wrote.
        value = repr(value)
    if not isinstance(value, str):
        raise QuantityError(f"quantities must be strings or numbers, not {type(value).__name__}")
    match = _QUANTITY.match(value)
    if match is None:
        raise QuantityError(
            f"quantities must match the regular expression "
            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {value!r}"
        )
    number = Fraction(
        match["number"] if not match["number"].endswith(".") else match["number"][:-1]
    )
    if match["binary"]:
        number *= _BINARY[match["binary"]]
    elif match["exp"] is not None:
        exponent = int(match["exp"])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"quantity exponent out of range in {value!r}")
        number *= Fraction(10) ** exponent
    else:
        number *= _DECIMAL[match["decimal"] or ""]
    return -number if match["sign"] == "-" else number


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def resource_value(name: str, value: str | int | float) -> int:
    """The integer kube schedules with: milli-CPU for ``cpu``, units for the rest, rounded up."""
    quantity = parse_quantity(value)
    return _ceil(quantity * 1000) if name == "cpu" else _ceil(quantity)


def format_milli(millis: int) -> str:
    """Render milli-CPU the way kubectl does: ``500m``, ``2``."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
